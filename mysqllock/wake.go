package mysqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// sleepSeconds is the length of one wait of a Driver's sleeping connection;
// another follows at once.
const sleepSeconds = 60

// linger is how long a Driver keeps its sleeping connection after its last
// waiter or holder left.
const linger = 100 * time.Millisecond

// retryOpen is how long a Driver whose sleeping connection could not be set
// up waits before it tries again (meanwhile its waiters poll).
const retryOpen = time.Second

// waker is a Driver's sleeping connection (see the package's Waiting and Told
// at once): its waiters are woken, and its holdings checked, when another
// session interrupts the connection's wait with KILL QUERY.
type waker struct {
	d *Driver

	mu         sync.Mutex
	cur        *sleeper
	gen        uint64 // counts the sleepers: a waiter queued under another missed wake-ups
	wakes      uint64 // counts the wake-ups: a waiter that subscribes after one may have missed it
	busy       int    // acquisitions under way
	subs       map[*sub]struct{}
	holds      driver.Holds // told of a force-unlock; its own lock, taken inside mu
	nholds     int          // holdings registered in holds
	stopTimer  *time.Timer
	idleSince  time.Time // when the last user left
	failedOpen time.Time
}

// sleeper is one sleeping connection and its goroutine: it waits for a named
// lock (GET_LOCK) that another connection of the Driver holds, so that only a
// KILL QUERY ends its wait.
type sleeper struct {
	conn   *sql.Conn
	holder *sql.Conn // holds name
	name   string
	id     int64 // conn's CONNECTION_ID()
	cancel context.CancelFunc
	ctx    context.Context
}

// discard closes c instead of returning it to the pool: a KILL QUERY of its
// id that comes late must not interrupt a statement of another use.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = c.Close()
}

// sub is one subscribed waiter.
type sub struct {
	ch         chan struct{}
	key, owner string
}

func newWaker(d *Driver) *waker {
	w := &waker{d: d}
	// A check that fails is not retried: the renewals find a loss.
	w.holds.Cause = errForced // the loss matches ErrNotHeld through ErrLockLost
	w.holds.CheckTimeout = d.cfg.requestTimeout
	w.holds.Forgot = func(int) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.nholds--
		w.maybeStop()
	}
	return w
}

// mark is what a waiter's acquisition knew of the sleeping connection before
// it was sent (its Taken's Handle): a waiter that subscribes later is woken at
// once when the connection changed or woke meanwhile.
type mark struct{ gen, wakes uint64 }

// ensure returns the id of the sleeping connection, setting it up if needed,
// and the mark of the acquisition; 0 when there is none (waiters poll). The
// caller calls used when its acquisition is over.
func (w *waker) ensure(ctx context.Context) (int64, mark) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy++
	if w.cur == nil && time.Since(w.failedOpen) >= retryOpen {
		s, err := w.open(ctx)
		if err != nil {
			w.failedOpen = time.Now()
		} else {
			w.cur = s
			w.gen++
			go w.loop(s)
			w.asleep(ctx, s)
		}
	}
	m := mark{w.gen, w.wakes}
	if w.cur == nil {
		return 0, m
	}
	return w.cur.id, m
}

// wakeable is ensure for one call of d: the sleeping connection's id and the
// call's mark (0 and no mark with WithPolling), and the function that ends
// the call's use of the connection.
func (d *Driver) wakeable(ctx context.Context) (int64, mark, func()) {
	if d.cfg.poll {
		return 0, mark{}, func() {}
	}
	conn, m := d.w.ensure(ctx)
	return conn, m, d.w.used
}

// open takes two connections of the pool: one holds a named lock of its
// own, the other (whose id it reads) will wait for it.
func (w *waker) open(ctx context.Context) (*sleeper, error) {
	ctx, cancel := context.WithTimeout(ctx, w.d.cfg.requestTimeout)
	defer cancel()
	holder, err := w.d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	name := fmt.Sprintf("dlock_wake_%016x", rand.Uint64())
	var got sql.NullInt64
	if err := holder.QueryRowContext(ctx, "SELECT GET_LOCK('"+name+"', 0)").Scan(&got); err != nil || got.Int64 != 1 {
		discard(holder)
		return nil, fmt.Errorf("mysqllock: GET_LOCK of the wake-up lock: %v %v", got, err)
	}
	conn, err := w.d.db.Conn(ctx)
	if err != nil {
		discard(holder)
		return nil, err
	}
	var id int64
	if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		discard(holder)
		discard(conn)
		return nil, err
	}
	sctx, scancel := context.WithCancel(context.Background())
	return &sleeper{conn: conn, holder: holder, name: name, id: id, ctx: sctx, cancel: scancel}, nil
}

// asleepTries bounds how many times asleep looks for the first wait of a
// sleeper, a millisecond apart.
const asleepTries = 50

// asleep waits until the server runs s's first wait: a KILL QUERY that
// comes before would be lost (it interrupts a statement under way, or none),
// and the waiters that name s would sleep until the holder's TTL. It looks
// at the server's list of its own sessions, which needs no privilege.
func (w *waker) asleep(ctx context.Context, s *sleeper) {
	for range asleepTries {
		var n int
		err := w.d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist WHERE id = "+num(s.id)+" AND info LIKE 'SELECT GET_LOCK(%'").Scan(&n)
		if err != nil || n > 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// loop sleeps on s until it is no longer the current sleeper, waking every
// subscriber and checking every holding when a wait was interrupted. A
// connection that fails ends the sleeper; the subscribers are woken (they try
// again, and the next acquisition sets up another).
func (w *waker) loop(s *sleeper) {
	defer func() {
		s.cancel()
		discard(s.conn)
		discard(s.holder)
	}()
	for {
		var got sql.NullInt64
		err := s.conn.QueryRowContext(s.ctx, fmt.Sprintf("SELECT GET_LOCK('%s', %d)", s.name, sleepSeconds)).Scan(&got)
		// A wait that ends without the lock (NULL, or an error) was
		// interrupted; one that gets it means that the holding connection
		// is gone: the sleeper ends.
		interrupted := err == nil && !got.Valid || errorNumber(err) == errInterrupted
		if err == nil && got.Int64 == 1 {
			err = errors.New("mysqllock: the wake-up lock's holder is gone")
		}
		w.mu.Lock()
		if w.cur != s {
			w.mu.Unlock()
			return
		}
		if err != nil && !interrupted {
			w.cur = nil
			w.gen++
		}
		if err != nil || interrupted {
			w.wakeAll()
		}
		w.mu.Unlock()
		if err != nil && !interrupted {
			return
		}
	}
}

// wakeAll wakes every subscriber and has every holding checked; w.mu is held.
func (w *waker) wakeAll() {
	w.wakes++
	for s := range w.subs {
		select {
		case s.ch <- struct{}{}:
		default:
		}
	}
	w.holds.SuspectAll()
}

// othersWait reports whether a waiter of key other than owner is subscribed:
// the row must go on naming the Driver when owner's acquisition is granted.
func (w *waker) othersWait(key, owner string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for s := range w.subs {
		if s.key == key && s.owner != owner {
			return true
		}
	}
	return false
}

// wakeKey wakes the Driver's own waiters of key, which a release by the
// Driver does without a KILL QUERY.
func (w *waker) wakeKey(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wakes++
	for s := range w.subs {
		if s.key == key {
			select {
			case s.ch <- struct{}{}:
			default:
			}
		}
	}
}

// used ends an acquisition that ensure counted.
func (w *waker) used() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy--
	w.maybeStop()
}

// maybeStop schedules the end of the sleeping connection when nobody uses
// it; w.mu is held.
func (w *waker) maybeStop() {
	if w.cur == nil || w.busy > 0 || len(w.subs) > 0 || w.nholds > 0 {
		return
	}
	w.idleSince = time.Now()
	if w.stopTimer == nil {
		w.stopTimer = time.AfterFunc(linger, w.stopIdle)
	}
}

// stopIdle ends the sleeping connection if nobody has used it for linger:
// KILL QUERY ends its wait, and its goroutine closes its two connections (the
// driver closes them when the KILL fails). A Driver that locks again and again
// keeps it, however short the time between its holdings.
func (w *waker) stopIdle() {
	w.mu.Lock()
	w.stopTimer = nil
	s := w.cur
	if s == nil || w.busy > 0 || len(w.subs) > 0 || w.nholds > 0 {
		w.mu.Unlock()
		return
	}
	if idle := time.Since(w.idleSince); idle < linger {
		w.stopTimer = time.AfterFunc(linger-idle, w.stopIdle)
		w.mu.Unlock()
		return
	}
	w.cur = nil
	w.gen++
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, w.d.cfg.requestTimeout)
	defer cancel()
	if _, err := w.d.db.ExecContext(ctx, "KILL QUERY "+num(s.id)); err != nil {
		s.cancel() // the driver closes the connection
	}
}

// Subscribe implements driver.Notifier: h's waiter is woken when its Driver's
// sleeping connection is interrupted (a release, an abandoned wait, a
// force-unlock), or at once when the connection h queued under has ended
// since. Without a sleeping connection (WithPolling, or one that could not be
// set up) it returns an error and the waiter polls.
func (d *Driver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if d == nil {
		return nil, nil, errNilDriver
	}
	if d.cfg.poll {
		return nil, nil, fmt.Errorf("mysqllock: polling: %w", errors.ErrUnsupported)
	}
	return d.w.subscribe(h)
}

// subscribe registers the waiter h, which queued under the sleeper
// generation h.Handle.
func (w *waker) subscribe(h driver.Holding) (<-chan struct{}, func(), error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return nil, nil, errors.New("mysqllock: no sleeping connection: waiters poll")
	}
	s := &sub{ch: make(chan struct{}, 1), key: h.Key, owner: h.Owner}
	if m, _ := h.Handle.(mark); m != (mark{w.gen, w.wakes}) {
		s.ch <- struct{}{}
	}
	if w.subs == nil {
		w.subs = map[*sub]struct{}{}
	}
	w.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			delete(w.subs, s)
			w.maybeStop()
		})
	}, nil
}

// errForced is the cause of a force-unlocked holding's loss.
var errForced = errors.New("mysqllock: the lock was force-unlocked, and the table no longer holds it for this owner")

// hold registers a holding of key by owner, granted while the sleeper of
// m's generation was named in its row, and returns its Grant.Lost; nil when
// that sleeper has ended (the renewals find a loss).
func (w *waker) hold(d driver.Driver, key, owner string, m mark) context.Context {
	if w.d.cfg.poll {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil || m.gen != w.gen {
		return nil
	}
	w.nholds++
	return &w.holds.Add(d, key, owner, nil, time.Now()).LossSignal
}

// sleeperID is the id of the current sleeping connection, 0 without one.
func (w *waker) sleeperID() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == nil {
		return 0
	}
	return w.cur.id
}
