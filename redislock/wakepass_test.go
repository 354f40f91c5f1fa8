package redislock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
)

// holdLog records, per key, when a lock was taken and given back (as seen by
// the holders, all in this process) and when a patient waiter waited, to find
// the longest stretch in which a key was free while a patient waiter waited.
type holdLog struct {
	mu    sync.Mutex
	holds map[string][][2]time.Time // taken, given back
	waits map[string][][2]time.Time // the patient waiter's Lock calls
}

func newHoldLog() *holdLog {
	return &holdLog{holds: map[string][][2]time.Time{}, waits: map[string][][2]time.Time{}}
}

func (h *holdLog) hold(key string, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds[key] = append(h.holds[key], [2]time.Time{from, to})
}

func (h *holdLog) wait(key string, from, to time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waits[key] = append(h.waits[key], [2]time.Time{from, to})
}

// longestFree returns the longest time a key was free (between two holds) while
// a patient waiter waited for it, the key, and when that time began.
func (h *holdLog) longestFree() (time.Duration, string, time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var longest time.Duration
	var which string
	var start time.Time
	for key, holds := range h.holds {
		sort.Slice(holds, func(i, j int) bool { return holds[i][0].Before(holds[j][0]) })
		var free [][2]time.Time // gaps between holds
		end := time.Time{}
		for _, x := range holds {
			if !end.IsZero() && x[0].After(end) {
				free = append(free, [2]time.Time{end, x[0]})
			}
			if x[1].After(end) {
				end = x[1]
			}
		}
		for _, w := range h.waits[key] {
			for _, f := range free {
				from, to := later(f[0], w[0]), earlier(f[1], w[1])
				if d := to.Sub(from); d > longest {
					longest, which, start = d, key, from
				}
			}
		}
	}
	return longest, which, start
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// TestPlainLockWakeNotLost: while callers with deadlines of 0-5 ms (200
// goroutines on 4 Clients, 5 keys) keep giving up, a patient waiter (a fifth
// Client) never waits long for a free key: a release's wake that lands on a
// process whose waiters have left is passed on at once to the next process.
// Before, keys sat free for up to the holder's TTL with a patient waiter
// waiting.
func TestPlainLockWakeNotLost(t *testing.T) {
	// A lost wake leaves the key free until the patient waiter's retry at the
	// remaining TTL of the holder it last found (holders hold for a
	// millisecond: nearly the whole TTL). A loaded host running the race
	// detector delays a woken waiter by a second or two (2.7 s has been seen
	// at a load average of 6, counting the holder's Unlock round trip). The
	// bound, a third of the TTL, tells the two apart; a hold counts until its
	// Unlock returned, so that a slow release is not taken for a free key.
	const ttl = 15 * time.Second
	const storm = 6 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	keys := make([]string, 5)
	for i := range keys {
		keys[i] = dlocktest.Key(t)
	}
	clients := make([]*redislock.Client, 4)
	for i := range clients {
		clients[i] = newClient(t, dlock.WithTTL(ttl))
	}
	wakes := &wakeLog{at: map[string][]time.Time{}}
	patient := newClient(t, dlock.WithTTL(ttl), dlock.WithObserver(wakes))
	log := newHoldLog()
	stop := time.Now().Add(storm)
	var g errgroup.Group
	use := func(l *dlock.Lease, key string, from time.Time) error {
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond) // the work
		err := l.Unlock(ctx)
		log.hold(key, from, time.Now())
		return err
	}
	for w := range 200 {
		g.Go(func() error {
			c := clients[w%len(clients)]
			for i := 0; i < 1e6 && time.Now().Before(stop); i++ {
				key := keys[rand.IntN(len(keys))]
				l, err := briefLock(ctx, c, key, 5*time.Millisecond)
				if err != nil {
					return err
				}
				if l == nil {
					continue
				}
				if err := use(l, key, time.Now()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	turns := make([]int, len(keys))
	for k, key := range keys {
		g.Go(func() error {
			for i := 0; i < 1e6 && time.Now().Before(stop); i++ {
				start := time.Now()
				l, err := patient.Lock(ctx, key, dlock.WithWait(2*ttl))
				log.wait(key, start, time.Now())
				if err != nil {
					return err
				}
				turns[k]++
				if err := use(l, key, time.Now()); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	longest, key, from := log.longestFree()
	t.Logf("patient turns per key %v; longest free stretch while a patient waiter waited: %v (key %s)", turns, longest.Round(time.Millisecond), key)
	if longest > ttl/3 {
		t.Errorf("a key was free for %v while a patient waiter waited for it (TTL %v); the patient waiter's wakes from then on, after: %v",
			longest.Round(time.Millisecond), ttl, wakes.after(key, from, 5))
	}
}

// wakeLog is an Observer that records when the patient waiter was woken, by
// key.
type wakeLog struct {
	dlock.NopObserver
	mu sync.Mutex
	at map[string][]time.Time
}

func (w *wakeLog) Wake(_ context.Context, t dlock.Target) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.at[t.Key] = append(w.at[t.Key], time.Now())
}

// after returns how long after from the first n wakes of key came.
func (w *wakeLog) after(key string, from time.Time, n int) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	var d []time.Duration
	for _, at := range w.at[key] {
		if !at.Before(from) && len(d) < n {
			d = append(d, at.Sub(from).Round(time.Millisecond))
		}
	}
	return d
}

// briefLock is one call of a storm of callers that give up within up to max:
// the lease, or nil when the call gave up as such a call may.
func briefLock(ctx context.Context, c *redislock.Client, key string, max time.Duration) (*dlock.Lease, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Duration(rand.Int64N(int64(max))))
	defer cancel()
	l, err := c.Lock(cctx, key)
	if err != nil && (errors.Is(err, dlock.ErrNotObtained) || errors.Is(err, dlock.ErrUnavailable)) {
		return nil, nil
	}
	return l, err
}

// wakeScene is a plain lock held by a Client, a waiting Client S (first in
// the waiting set) and a patient Client P behind it.
type wakeScene struct {
	t            *testing.T
	ctx          context.Context
	key          string
	probe        *redis.Client
	held         *dlock.Lease
	stopS        context.CancelFunc
	sDone, pDone chan error
}

// newWakeScene has the lock taken (TTL 8s) and S wait for it.
func newWakeScene(t *testing.T, ctx context.Context, s *redislock.Client) *wakeScene {
	w := &wakeScene{t: t, ctx: ctx, key: dlocktest.Key(t), probe: newRDB(t, srv.Addr), sDone: make(chan error, 1), pDone: make(chan error, 1)}
	var err error
	if w.held, err = newClient(t, dlock.WithTTL(8*time.Second)).TryLock(ctx, w.key); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	w.stopS = scancel
	go func() { _, err := s.Lock(sctx, w.key); w.sDone <- err }()
	w.inSet("S waits in the set", 1)
	return w
}

func (w *wakeScene) inSet(what string, n int64) {
	eventually(w.t, what, func() bool { return w.probe.ZCard(w.ctx, redislock.WaitingKey(w.key)).Val() == n })
}

// patientWaits has P wait behind S, and then S give up.
func (w *wakeScene) patientWaits() {
	p := newClient(w.t)
	go func() {
		l, err := p.Lock(w.ctx, w.key, dlock.WithWait(20*time.Second))
		if err == nil {
			err = l.Unlock(w.ctx)
		}
		w.pDone <- err
	}()
	w.inSet("P waits in the set", 2)
	w.stopS()
	if err := <-w.sDone; !errors.Is(err, context.Canceled) {
		w.t.Fatalf("S's Lock: %v", err)
	}
}

// release frees the lock, and checks that P gets it at once, not at the
// holder's TTL.
func (w *wakeScene) release() {
	released := time.Now()
	if err := w.held.Unlock(w.ctx); err != nil {
		w.t.Fatal(err)
	}
	if err := <-w.pDone; err != nil {
		w.t.Fatal(err)
	}
	if d := time.Since(released); d > 2*time.Second {
		w.t.Errorf("P got the free lock %v after the release, want at once (the holder's TTL was 8s)", d.Round(time.Millisecond))
	}
}

// TestPlainLockWakeAfterWaitersLeft: a release wakes a process whose last
// waiter has just left (the process left the waiting set after the release
// took it off): that process passes the wake on, and the next waiting process
// gets the lock at once rather than at the holder's TTL.
func TestPlainLockWakeAfterWaitersLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := newWakeScene(t, ctx, newClient(t))
	sid := w.probe.ZRange(ctx, redislock.WaitingKey(w.key), 0, 0).Val()[0]
	w.patientWaits()
	eventually(t, "S left the set", func() bool { return w.probe.ZScore(ctx, redislock.WaitingKey(w.key), sid).Err() != nil })
	// The release that raced with S's leaving: it finds S first in the set.
	if err := w.probe.ZAdd(ctx, redislock.WaitingKey(w.key), redis.Z{Score: 0, Member: sid}).Err(); err != nil {
		t.Fatal(err)
	}
	w.release()
}

// TestPlainLockWakeNotKeptByGoneWaiter: a waiting attempt whose context ends
// before its caller subscribes (the caller gives up) leaves no registration
// behind that would swallow the process's next wake.
func TestPlainLockWakeNotKeptByGoneWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := redislock.NewDriver(newRDB(t, srv.Addr))
	if err != nil {
		t.Fatal(err)
	}
	s, err := redislock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	w := newWakeScene(t, ctx, s)
	// A second acquisition of S's process: one busy attempt, then its caller
	// gives up before subscribing.
	zctx, zcancel := context.WithCancel(ctx)
	_, err = d.Acquire(zctx, driver.AcquireRequest{Key: w.key, Owner: "0123456789abcdef0123456789abcdef", TTL: time.Second, Waiting: true})
	var busy *dlock.BusyError
	if !errors.As(err, &busy) {
		t.Fatalf("attempt on a held lock: %v", err)
	}
	zcancel()
	w.patientWaits()
	w.release()
}
