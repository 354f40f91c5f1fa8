package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// watchLinger is how long a key's watch outlives its last user, so that a
// key locked again and again keeps one watch.
const watchLinger = time.Second

// errGone is the cause of a holding's loss that its key's watch saw.
var errGone = errors.New("natslock: the key was deleted, purged, expired or written by another owner")

// keyWatch is the Driver's one watch of a key, shared by the holders, the
// waiters and the observers of the key in the Driver.
type keyWatch struct {
	d      *Driver
	key    string
	cancel context.CancelFunc

	// Under d.mu:
	holds    []*holdSignal
	waiters  []*waiter
	watchers []chan struct{}
	linger   *time.Timer
	failed   bool
	// rewatched: the watch started again and has not delivered the key's
	// messages yet; seen: it delivered one since it started.
	rewatched, seen bool
	lastFree        uint64    // the revision of the last deletion, purge or expiry seen
	busy            time.Time // when an attempt of the Driver last found the key held
	freed           time.Time // when the Driver last released the key

	// A fair Driver's watch follows the key's queue (its entries, key.<id>):
	queue  map[string]entry // the live entries, by id
	ready  bool             // the entries that existed when the watch started were delivered
	maxRev uint64           // the newest revision delivered
}

// takenMark is the Handle of a Taken: the revision of the key's message that
// kept the attempt out. A waiter that subscribes after the watch saw the key
// freed since is woken at once.
type takenMark struct{ rev uint64 }

// contendedFor is how long a key counts as contended after an attempt of the
// Driver found it held.
const contendedFor = time.Second

// contended notes that an attempt found the key held.
func (d *Driver) contended(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if kw := d.watches[key]; kw != nil {
		kw.busy = time.Now()
	}
}

// released notes that the Driver released the key.
func (d *Driver) released(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if kw := d.watches[key]; kw != nil {
		kw.freed = time.Now()
	}
}

// yielding returns how long more a waiter of the Driver leaves the key to the
// waiters of other processes that its release woke: a write's round trip and
// a half after the release, when the key was contended lately; 0 otherwise.
// Without it the releasing process, a round trip ahead of every woken
// waiter, would take a contended key again and again.
func (d *Driver) yielding(key string) time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	kw := d.watches[key]
	if kw == nil || kw.freed.IsZero() || time.Since(kw.busy) > contendedFor {
		return 0
	}
	yield := min(max(time.Duration(d.rtt.Load())*3/2, time.Millisecond), 100*time.Millisecond)
	return yield - time.Since(kw.freed)
}

// roundTrip adds a write's round trip to the Driver's moving average.
func (d *Driver) roundTrip(rt time.Duration) {
	old := d.rtt.Load()
	if old == 0 {
		d.rtt.Store(int64(rt))
		return
	}
	d.rtt.Store(old + (int64(rt)-old)/8)
}

// holdSignal is a holding watched for its loss.
type holdSignal struct {
	driver.LossSignal
	kw        *keyWatch
	owner     string
	hold      *hold
	releasing bool // under d.mu: its own delete marker is on its way
}

// waiter is one Lock waiting for the key.
type waiter struct {
	wake chan struct{}
}

// use returns the key's watch, started if needed, with its linger stopped;
// d.mu is held.
func (d *Driver) use(key string) *keyWatch {
	kw := d.watches[key]
	if kw != nil && !kw.failed {
		if kw.linger != nil {
			kw.linger.Stop()
			kw.linger = nil
		}
		return kw
	}
	ctx, cancel := context.WithCancel(context.Background())
	kw = &keyWatch{d: d, key: key, cancel: cancel}
	d.watches[key] = kw
	go kw.run(ctx)
	return kw
}

// unused starts the watch's linger when nothing uses it any more; d.mu is
// held.
func (kw *keyWatch) unused() {
	if len(kw.holds) > 0 || len(kw.waiters) > 0 || len(kw.watchers) > 0 || kw.linger != nil || kw.failed {
		return
	}
	kw.linger = time.AfterFunc(watchLinger, func() {
		d := kw.d
		d.mu.Lock()
		defer d.mu.Unlock()
		if kw.linger == nil || len(kw.holds) > 0 || len(kw.waiters) > 0 || len(kw.watchers) > 0 {
			return
		}
		kw.linger = nil
		if d.watches[kw.key] == kw {
			delete(d.watches, kw.key)
		}
		kw.cancel()
	})
}

// run follows the key's messages until the watch is cancelled or fails. A
// reconnection of the Driver's connection may follow a restart of the
// server, which loses the watch's consumer (nothing is delivered any more,
// for as long as the client takes to notice): the watch starts again then,
// its holders and waiters kept. A watch that cannot be set up (the server
// restarting, its JetStream not ready yet) is tried again for up to
// rewatchFor before it fails.
func (kw *keyWatch) run(ctx context.Context) {
	defer kw.cancel()
	var reconnected chan nats.Status
	if nc := kw.d.js.Conn(); nc != nil {
		reconnected = nc.StatusChanged(nats.CONNECTED)
		defer nc.RemoveStatusListener(reconnected)
	}
	var since time.Time // the reconnection, or the failed set-up, it starts again after
	for {
		switch kw.watch(ctx, reconnected) {
		case watchReconnected:
			kw.rewatch()
			since = time.Now()
			continue
		case watchNotStarted:
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) < rewatchFor {
				select {
				case <-ctx.Done():
				case <-time.After(rewatchRetry):
					continue
				}
			}
		}
		break
	}
	kw.fail()
}

// rewatchFor is how long a watch tries to start, every rewatchRetry, after a
// reconnection or its first failed set-up (a restarted server's JetStream may
// not serve yet).
const (
	rewatchFor   = 10 * time.Second
	rewatchRetry = 100 * time.Millisecond
)

// How a watch ended.
const (
	watchEnded       = iota // cancelled, or its updates stopped
	watchReconnected        // the connection reconnected
	watchNotStarted         // it could not be set up
)

// watch follows the key's messages until ctx ends, the watch stops, or the
// connection reconnected (also while the watch is being set up: a request
// lost in a restart would hold the set-up up to its timeout), and says
// which.
func (kw *keyWatch) watch(ctx context.Context, reconnected <-chan nats.Status) int {
	// The watch lives as long as wctx (its subscription ends with it).
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	type setUp struct {
		w   jetstream.KeyWatcher
		err error
	}
	ready := make(chan setUp, 1)
	go func() {
		b, err := kw.d.openBucket(wctx)
		if err != nil {
			ready <- setUp{err: err}
			return
		}
		pattern := kw.key
		if kw.d.fair {
			pattern += ".*"
		}
		w, err := b.kv.Watch(wctx, pattern)
		ready <- setUp{w, err}
	}()
	var w jetstream.KeyWatcher
	select {
	case <-ctx.Done():
		return watchEnded
	case <-reconnected:
		return watchReconnected
	case su := <-ready:
		if su.err != nil {
			return watchNotStarted
		}
		w = su.w
	}
	// The watcher's channel is closed by Stop, not by the end of ctx: the
	// loop watches both, so that a cancelled watch (Close, its linger)
	// ends at once.
	defer func() { _ = w.Stop() }()
	updates := w.Updates()
	for {
		select {
		case <-ctx.Done():
			return watchEnded
		case <-reconnected:
			return watchReconnected
		case e, ok := <-updates:
			if !ok {
				return watchEnded
			}
			kw.event(e)
		}
	}
}

// rewatch readies the watch for its start again: what it knew of the key's
// queue is delivered anew, and once the new watch has delivered the key's
// messages, a holding whose key (or queue entry) it did not deliver is lost
// (purged meanwhile).
func (kw *keyWatch) rewatch() {
	d := kw.d
	d.mu.Lock()
	defer d.mu.Unlock()
	kw.rewatched, kw.seen = true, false
	kw.lastFree = 0 // the server may have lost writes: revisions start again from its word
	if d.fair {
		kw.queue, kw.ready = nil, false
	}
}

// loseUnseen tells the holdings that the restarted watch found no message
// of; d.mu is held.
func (kw *keyWatch) loseUnseen() {
	for _, h := range kw.holds {
		if h.releasing {
			continue
		}
		if kw.d.fair {
			if _, ok := kw.queue[h.hold.sub]; ok {
				continue
			}
		} else if kw.seen {
			continue
		}
		h.Lose(errGone)
	}
}

// fail ends a watch that was stopped, could not be set up or broke: its
// waiters and observers poll from then on (their channels are closed), its
// holders learn of a loss by their renewals, and the key's next user starts
// another watch.
func (kw *keyWatch) fail() {
	d := kw.d
	d.mu.Lock()
	defer d.mu.Unlock()
	kw.failed = true
	if d.watches[kw.key] == kw {
		delete(d.watches, kw.key)
	}
	for _, w := range kw.waiters {
		close(w.wake)
	}
	for _, c := range kw.watchers {
		close(c)
	}
	kw.waiters, kw.watchers = nil, nil
}

// event handles one message of the key (nil: the watch has delivered the
// key's last message, and follows it from then on).
func (kw *keyWatch) event(e jetstream.KeyValueEntry) {
	d := kw.d
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range kw.watchers {
		notify(c)
	}
	kw.seen = kw.seen || e != nil
	if d.fair {
		kw.queueEvent(e)
	} else {
		kw.plainEvent(e)
	}
	if e == nil && kw.rewatched {
		kw.rewatched = false
		kw.loseUnseen()
	}
}

// plainEvent is event for a plain Driver; d.mu is held.
func (kw *keyWatch) plainEvent(e jetstream.KeyValueEntry) {
	d := kw.d
	if e == nil {
		// Established: whatever was missed before, a waiter tries again.
		for _, w := range kw.waiters {
			notify(w.wake)
		}
		return
	}
	free := e.Operation() != jetstream.KeyValuePut
	var rec record
	if !free && (json.Unmarshal(e.Value(), &rec) != nil || rec.Owner == "") {
		rec = record{}
	}
	if free {
		d.lastFresh()
		if rev := e.Revision(); rev > d.last[kw.key] {
			d.last[kw.key] = rev
		}
		kw.lastFree = max(kw.lastFree, e.Revision())
		if len(kw.waiters) > 0 {
			notify(kw.waiters[0].wake)
		}
	}
	for _, h := range kw.holds {
		token := h.hold.token
		if e.Revision() <= token || h.releasing {
			continue // older than the holding, or its own release
		}
		if !free && rec.Owner == h.owner && rec.Token == token {
			continue // its own renewal
		}
		h.Lose(errGone)
	}
}

// notify sends a wake-up on c without blocking.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// watchHold registers a holding of key by owner with the key's watch and
// returns its loss signal.
func (d *Driver) watchHold(key, owner string, h *hold) *holdSignal {
	d.mu.Lock()
	defer d.mu.Unlock()
	kw := d.use(key)
	s := &holdSignal{kw: kw, owner: owner, hold: h}
	s.Forgetter = s
	kw.holds = append(kw.holds, s)
	h.sig = s
	return s
}

// Forget implements driver.Forgetter: the lease has ended.
func (s *holdSignal) Forget(*driver.LossSignal) {
	d := s.kw.d
	d.mu.Lock()
	defer d.mu.Unlock()
	kw := s.kw
	if i := slices.Index(kw.holds, s); i >= 0 {
		kw.holds = slices.Delete(kw.holds, i, i+1)
		kw.unused()
	}
}

// releasing marks h's holding as being released: its own delete marker is
// no loss.
func (d *Driver) releasing(h *hold, on bool) {
	if h.sig == nil {
		return
	}
	d.mu.Lock()
	h.sig.releasing = on
	d.mu.Unlock()
}

// Subscribe implements driver.Notifier: h's waiter is woken by a deletion,
// purge or expiry of the key that the Driver's watch of the key sees (the
// first waiter of the Driver only; when it stops waiting, the next), and when
// the watch is (re)established.
func (d *Driver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if _, err := d.open(ctx, h.Key); err != nil {
		return nil, nil, err
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	d.mu.Lock()
	kw := d.use(h.Key)
	kw.waiters = append(kw.waiters, w)
	if m, ok := h.Handle.(takenMark); ok && kw.lastFree > m.rev {
		notify(w.wake) // freed since the attempt that found it held
	}
	d.mu.Unlock()
	var once sync.Once
	return w.wake, func() {
		once.Do(func() {
			d.mu.Lock()
			defer d.mu.Unlock()
			if i := slices.Index(kw.waiters, w); i >= 0 {
				kw.waiters = slices.Delete(kw.waiters, i, i+1)
				if i == 0 && len(kw.waiters) > 0 {
					// It may have been woken for nothing: the next one
					// tries in its place.
					notify(kw.waiters[0].wake)
				}
				kw.unused()
			}
		})
	}, nil
}

// WatchKey implements driver.KeyWatcher: every message of the key that the
// Driver's watch of it sees.
func (d *Driver) WatchKey(ctx context.Context, key string) (<-chan struct{}, error) {
	if _, err := d.open(ctx, key); err != nil {
		return nil, err
	}
	c := make(chan struct{}, 1)
	d.mu.Lock()
	kw := d.use(key)
	kw.watchers = append(kw.watchers, c)
	d.mu.Unlock()
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if i := slices.Index(kw.watchers, c); i >= 0 {
			kw.watchers = slices.Delete(kw.watchers, i, i+1)
			close(c)
			kw.unused()
		}
	})
	return c, nil
}

// Close stops the Driver's watches at once (they stop a second after their
// last use otherwise). Leases still held learn of a loss by their renewals
// only; waiters poll.
func (d *Driver) Close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	ws := make([]*keyWatch, 0, len(d.watches))
	for _, kw := range d.watches {
		ws = append(ws, kw)
	}
	d.mu.Unlock()
	for _, kw := range ws {
		kw.cancel()
	}
}
