package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/driver"

	"github.com/jackc/pgx/v5"
)

// refuseFor is how long a Driver whose LISTEN was refused lets its waiters
// poll before it tries to LISTEN again.
const refuseFor = time.Minute

// minPause and maxPause bound the pause between two attempts to set up the
// listening connection after a failure.
const minPause, maxPause = 20 * time.Millisecond, 2 * time.Second

// listenLinger is how long a listening connection stays after its last
// waiter left: a process whose waits follow each other (a contended lock
// changes hands every few milliseconds) keeps one connection instead of
// setting one up per wait. It is short, so that the connection and its
// goroutine are gone soon after the last wait (a program's leak check at exit
// retries for about half a second).
var listenLinger = 100 * time.Millisecond

// buckets is the number of notification counters of a listener; keys share
// them by hash.
const buckets = 256

// listener is a Driver's LISTEN connection and its waiters. The connection
// exists while somebody waits, and for listenLinger after.
type listener struct {
	d      *Driver
	listen string // the LISTEN statement
	before func() // called before each LISTEN (for tests)

	mu           sync.Mutex
	subs         map[string]map[*sub]struct{} // by key
	n            int                          // subscriptions not cancelled yet
	cur          *listenRun                   // the running connection loop, nil when none
	live         bool                         // cur has LISTENed and is reading notifications
	refusedUntil time.Time
	refused      error
	// gen counts the changes of live and of cur; seen counts the
	// notifications received, by bucket of their key (of their key and
	// waiter for those that wake one waiter). Together they tell a
	// subscriber whether a notification for it may have come since its
	// attempt began (see mark).
	gen  uint64
	seen [buckets]uint64
	// linger ends cur after its last user left; lingerGen tells a timer
	// that fired late from the current one.
	linger    *time.Timer
	lingerGen uint64
	lingerFor time.Duration // listenLinger, unless a test changed it

	holds  driver.Holds // the holdings told of a force-unlock (loss.go); its own lock, taken inside mu
	nholds int          // holdings among the users counted in n
	nkeep  int          // acquisition attempts among the users counted in n (see keep)

	// Counters, for tests and figures.
	connects, wakes atomic.Int64
}

// sub is one waiter's subscription.
type sub struct {
	key    string
	id     string // the waiter's id in the row's queue (see waiterID)
	wake   chan struct{}
	closed bool // wake is closed: notifications stopped, the waiter polls
}

// listenMark is what a listener had received when an acquisition attempt
// began: the Handle of the attempt's driver.Taken, handed back to Subscribe.
// seen counts the notifications that wake every waiter of the key, seenID
// those that wake the one waiter.
type listenMark struct{ gen, seen, seenID uint64 }

// bucket is the counter of the notifications of key that wake every waiter,
// or, with an id, the one waiter id.
func bucket(key, id string) int {
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	if id != "" {
		h = (h ^ uint32(wakeSep[0])) * 16777619
		for i := 0; i < len(id); i++ {
			h = (h ^ uint32(id[i])) * 16777619
		}
	}
	return int(h % buckets)
}

// waiterID is the id under which owner waits in a row's queue: its last
// waiterIDLen characters (the queries' right($2, waiterIDLen)).
func waiterID(owner string) string {
	i := len(owner)
	for n := 0; n < waiterIDLen && i > 0; n++ {
		_, size := utf8.DecodeLastRuneInString(owner[:i])
		i -= size
	}
	return owner[i:]
}

// mark returns what l has received so far for the waiter id of key (nil when
// it is not listening), and whether the waiter may join the row's queue (not
// while LISTEN is refused: it polls then).
func (l *listener) mark(key, id string) (any, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.live {
		return nil, l.refused == nil || !time.Now().Before(l.refusedUntil)
	}
	return listenMark{l.gen, l.seen[bucket(key, "")], l.seen[bucket(key, id)]}, true
}

// listenRun is one run of the connection loop.
type listenRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func newListener(d *Driver) *listener {
	l := &listener{
		d: d,
		// The table's channel (a wake-up of every waiter of a key, a
		// force-unlock, a latch), and the Driver's own (a release's
		// wake-up of one of its waiters).
		listen: "LISTEN " + pgx.Identifier{d.channel}.Sanitize() + "; LISTEN " + pgx.Identifier{wakePrefix + d.id}.Sanitize(),
		subs:   map[string]map[*sub]struct{}{},

		lingerFor: listenLinger,
	}
	l.initHolds()
	return l
}

// Subscribe implements driver.Notifier. The waiter is woken when a NOTIFY for
// h.Key arrives (a release, a forced unlock, an abandoned acquisition), when
// the listening connection is (re)established (notifications may have been
// missed), and at once when it subscribes to a connection that is already
// listening unless that connection was listening when the waiter's last
// attempt began (h.Handle) and has received no notification of the key since
// (a release may have come between the attempt and the subscription). With
// WithPolling, or while LISTEN is refused, it returns an error and the Client
// polls. cancel must be called exactly once; the connection closes
// listenLinger after the last cancel, unless a waiter comes meanwhile.
func (d *Driver) Subscribe(_ context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if d == nil {
		return nil, nil, errNilDriver
	}
	if d.cfg.poll {
		return nil, nil, fmt.Errorf("pglock: notifications disabled (WithPolling): %w", errors.ErrUnsupported)
	}
	return d.ln.subscribe(h.Key, waiterID(h.Owner), h.Handle)
}

func (l *listener) subscribe(key, id string, mark any) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Now().Before(l.refusedUntil) {
		return nil, nil, errors.Join(driver.ErrRefused, fmt.Errorf("pglock: LISTEN refused: %w", l.refused))
	}
	s := &sub{key: key, id: id, wake: make(chan struct{}, 1)}
	if l.subs[key] == nil {
		l.subs[key] = map[*sub]struct{}{}
	}
	l.subs[key][s] = struct{}{}
	switch started := l.use(); {
	case started:
	case l.live:
		if m, ok := mark.(listenMark); !ok || m != (listenMark{l.gen, l.seen[bucket(key, "")], l.seen[bucket(key, id)]}) {
			s.notify()
		}
	}
	var once sync.Once
	return s.wake, func() { once.Do(func() { l.unsubscribe(s) }) }, nil
}

// use counts a user of the connection (a waiter or a holding), and starts
// the connection loop, reporting so, when none runs; l.mu is held.
func (l *listener) use() (started bool) {
	l.n++
	if l.linger != nil {
		l.linger.Stop()
	}
	if l.cur != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &listenRun{cancel: cancel, done: make(chan struct{})}
	l.cur, l.live = r, false
	l.gen++
	go l.loop(ctx, r)
	return true
}

// keep counts an acquisition attempt as a user of the connection while it
// runs, when a connection is set up (it starts none), and reports whether it
// did (then release must follow). A Driver that releases and locks again at
// once (a contended lock, or one key after another) keeps its connection even
// when the attempt takes longer than the linger, as it does on a loaded
// server: the connection is not closed under it and set up again by the
// attempt's holding or wait, which would cost the server a new backend and
// wake every waiter of the Driver for an extra attempt.
func (l *listener) keep() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur == nil {
		return false
	}
	l.n++
	l.nkeep++
	if l.linger != nil {
		l.linger.Stop()
	}
	return true
}

// release uncounts an attempt that keep counted.
func (l *listener) release() {
	l.mu.Lock()
	l.nkeep--
	l.unuse()
	l.mu.Unlock()
}

// unuse uncounts a user, and lets the connection linger after the last; l.mu
// is held.
func (l *listener) unuse() {
	l.n--
	if l.n == 0 && l.cur != nil {
		l.lingerGen++
		// One timer, reset at each linger: a Driver that locks over and
		// over allocates none.
		if l.linger == nil {
			l.linger = time.AfterFunc(l.lingerFor, l.lingered)
		} else {
			l.linger.Reset(l.lingerFor)
		}
	}
}

func (l *listener) unsubscribe(s *sub) {
	l.mu.Lock()
	if set := l.subs[s.key]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(l.subs, s.key)
		}
	}
	l.unuse()
	l.mu.Unlock()
}

// lingered runs when the linger timer fires: it closes the connection if
// nobody has come since.
func (l *listener) lingered() {
	l.mu.Lock()
	r, g := l.cur, l.lingerGen
	l.mu.Unlock()
	if r != nil {
		l.idle(r, g)
	}
}

// idle closes the connection of run r if nobody has subscribed since the
// linger g began.
func (l *listener) idle(r *listenRun, g uint64) {
	l.mu.Lock()
	if l.n != 0 || l.cur != r || l.lingerGen != g {
		l.mu.Unlock()
		return
	}
	l.cur, l.live = nil, false
	l.gen++
	l.mu.Unlock()
	r.cancel()
	<-r.done
}

// notify wakes the waiter without blocking; l.mu is held.
func (s *sub) notify() {
	if s.closed {
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// wakeKey handles the payload of a notification if r is still the current
// run: a key wakes its waiters, a key, wakeSep and a waiter's id that one
// waiter of the key (every waiter of every key when all is set).
func (l *listener) wakeKey(r *listenRun, payload string, all bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != r {
		return
	}
	// A force-unlock's payload has its holdings checked; it wakes no waiter
	// (waiters' keys have no control characters), but a latch's or a
	// barrier's, which starts the same way, wakes its waiters.
	l.lostKey(payload)
	if all {
		for _, set := range l.subs {
			for s := range set {
				s.notify()
			}
		}
		return
	}
	key, id, one := strings.Cut(payload, wakeSep)
	l.seen[bucket(key, id)]++
	for s := range l.subs[key] {
		if one && s.id != id {
			continue
		}
		l.wakes.Add(1)
		s.notify()
	}
}

// setLive records whether r listens, and wakes every waiter and has every
// holding checked when it starts to: notifications may have been missed
// before.
func (l *listener) setLive(r *listenRun, live bool) {
	l.mu.Lock()
	if l.cur == r {
		l.live = live
		l.gen++
		if live {
			l.checkHolds()
		}
	}
	l.mu.Unlock()
	if live {
		l.wakeKey(r, "", true)
	}
}

// refuse stops notifications after LISTEN was refused: every waiter's channel
// is closed (its Client polls from then on), and new waiters poll for
// refuseFor.
func (l *listener) refuse(r *listenRun, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur != r {
		return
	}
	l.refused, l.refusedUntil = err, time.Now().Add(refuseFor)
	for _, set := range l.subs {
		for s := range set {
			if !s.closed {
				s.closed = true
				close(s.wake)
			}
		}
	}
	l.cur, l.live = nil, false
	l.gen++
	if l.linger != nil {
		l.linger.Stop()
	}
}

// loop keeps a LISTEN connection until ctx ends, setting it up again after
// every failure with a growing pause.
func (l *listener) loop(ctx context.Context, r *listenRun) {
	defer close(r.done)
	pause := minPause
	for ctx.Err() == nil {
		listened, err := l.run(ctx, r)
		if err != nil {
			l.refuse(r, err)
			return
		}
		if l.holdersOnly(r) {
			return // the next acquisition sets it up again (see loss.go)
		}
		if listened {
			pause = minPause
		}
		select {
		case <-ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, maxPause)
	}
}

// run connects, LISTENs, and wakes waiters on notifications until the
// connection fails or ctx ends. It returns whether it listened, and an error
// only when the server refused LISTEN for good.
func (l *listener) run(ctx context.Context, r *listenRun) (listened bool, refused error) {
	l.connects.Add(1)
	cctx, cancel := context.WithTimeout(ctx, l.d.cfg.requestTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, l.d.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, nil
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	if l.before != nil {
		l.before()
	}
	if _, err := conn.Exec(cctx, l.listen); err != nil {
		if code := sqlState(err); code != "" && !transient(code) {
			return false, err
		}
		return false, nil
	}
	l.setLive(r, true)
	defer l.setLive(r, false)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, nil
		}
		l.wakeKey(r, n.Payload, false)
	}
}
