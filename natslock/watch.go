package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"
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
	lastFree uint64    // the revision of the last deletion, purge or expiry seen
	busy     time.Time // when an attempt of the Driver last found the key held
	freed    time.Time // when the Driver last released the key

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

// run follows the key's messages until the watch is cancelled or fails.
func (kw *keyWatch) run(ctx context.Context) {
	defer kw.cancel()
	d := kw.d
	var w jetstream.KeyWatcher
	b, err := d.openBucket(ctx)
	if err == nil {
		pattern := kw.key
		if d.fair {
			pattern += ".*"
		}
		w, err = b.kv.Watch(ctx, pattern)
	}
	if err == nil {
		// The watcher's channel is closed by Stop, not by the end of ctx:
		// the loop watches both, so that a cancelled watch (Close, its
		// linger) ends at once.
		updates := w.Updates()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case e, ok := <-updates:
				if !ok {
					break loop
				}
				kw.event(e)
			}
		}
		_ = w.Stop()
	}
	kw.fail()
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
	if d.fair {
		kw.queueEvent(e)
		return
	}
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
