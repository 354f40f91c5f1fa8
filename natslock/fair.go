package natslock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultFairBucket names the key-value bucket of a FairDriver's locks when
// WithBucket is not given.
const DefaultFairBucket = "dlock_fair"

// releasedTTL is how long the marker that releases a queue entry stays in
// the bucket: the server then removes it without a trace, so that the
// entries of past acquisitions do not pile up.
const releasedTTL = time.Second

// FairDriver is the driver.Driver of fair locks in a JetStream key-value
// bucket: exclusive locks granted in the order their acquisitions queued.
// It is also a driver.Notifier, a driver.Abandoner, a driver.Inspector and
// a driver.TTLLimiter. Most users want NewFair.
//
// Every acquisition writes an entry of its own into the key's queue: the
// key key.<id> of the bucket, with a random id, the owner as its value and
// the lease's TTL. The entry's first revision (stream sequence) is its place
// in the queue and the fencing token of its holding; the live entry with the
// lowest such revision holds the lock. A Driver keeps one watch of a key's
// queue (key.*) and learns from it when its entry heads the queue: it then
// holds the lock without writing anything, so that a hand-over costs the
// holder's release (one write) and wakes the next holder's process only.
// Renewal rewrites the entry at its last revision with the TTL anew, release
// replaces it with a marker that the server removes a second later; a
// holding whose entry is deleted, purged, expired or written by anyone else
// is lost at once (its watch tells it).
//
// A waiting Lock's attempt writes (or rewrites) its entry with the lease's
// TTL and waits in the Driver for at most half that TTL, so that a holding
// it is granted meanwhile lasts at least as long on the server as the lease
// counts locally; it then tries again, keeping its place. A TryLock whose
// entry does not head the queue removes it. An abandoned Lock (cancelled, out
// of time) removes its entry and stops a late write of it.
//
// Fair locks live in a bucket of their own (DefaultFairBucket), apart from
// the Driver's plain locks: a plain and a fair lock of the same name are two
// locks.
type FairDriver struct{ d *Driver }

// fairDriver is what a FairDriver implements.
type fairDriver interface {
	driver.Driver
	driver.Notifier
	driver.Abandoner
	driver.Inspector
	driver.TTLLimiter
}

var _ fairDriver = (*FairDriver)(nil)

// NewFair returns a Client whose locks are granted in arrival order (see
// FairDriver), in the DefaultFairBucket of js's account, with opts as the
// defaults of its TryLock and Lock calls. Nothing is sent to the server:
// FairDriver.Migrate creates the bucket. A nil js or a bad option gives an
// error matching dlock.ErrInvalid.
func NewFair(js jetstream.JetStream, opts ...dlock.Option) (*Client, error) {
	f, err := NewFairDriver(js)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(f, opts...)
}

// NewFairDriver returns the driver of fair locks over js, set up by opts as
// NewDriver's are, in the DefaultFairBucket unless WithBucket names another.
// Nothing is sent to the server. A nil js or a bad option gives an error
// matching dlock.ErrInvalid.
func NewFairDriver(js jetstream.JetStream, opts ...Option) (*FairDriver, error) {
	d, err := NewDriver(js, append([]Option{WithBucket(DefaultFairBucket)}, opts...)...)
	if err != nil {
		return nil, err
	}
	d.fair, d.permits, d.kind = true, 1, driver.KindFair
	d.pending = map[string]*queueEntry{}
	return &FairDriver{d: d}, nil
}

// drv returns the Driver underneath, nil for a nil f (whose calls then fail
// with an error matching dlock.ErrInvalid).
func (f *FairDriver) drv() *Driver {
	if f == nil {
		return nil
	}
	return f.d
}

// Migrate creates the FairDriver's bucket if it does not exist, as
// Driver.Migrate does, and checks it.
func (f *FairDriver) Migrate(ctx context.Context) error { return f.drv().Migrate(ctx) }

// Check checks the bucket and the server as Driver.Check does.
func (f *FairDriver) Check(ctx context.Context) error { return f.drv().Check(ctx) }

// Close stops the FairDriver's watches at once, as Driver.Close does.
func (f *FairDriver) Close() { f.drv().Close() }

// Info implements driver.Driver: the fair lock of NATS.
func (f *FairDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "natslock", Kind: driver.KindFair}
}

// TTLLimits implements driver.TTLLimiter, as Driver.TTLLimits.
func (f *FairDriver) TTLLimits() driver.TTLLimits { return f.drv().TTLLimits() }

// entry is a queue entry as the key's watch last saw it.
type entry struct {
	permits int // a semaphore's: its number of permits (0 for 1)
	owner   string
	token   uint64 // its first revision: its place in the queue
	rev     uint64 // its last revision
	meta    string
	foreign bool // a value that is no dlock entry
	ends    time.Time
}

// queueEntry is an acquisition's own entry: its id in the key's queue, and
// its token and last revision once written (0 before).
type queueEntry struct {
	key, owner, id string
	token, rev     uint64
}

func (q *queueEntry) subject() string { return q.key + "." + q.id }

// queueEvent handles one message of a fair Driver's watch of a key's queue
// (nil: the entries that existed when the watch started were delivered);
// d.mu is held.
func (kw *keyWatch) queueEvent(e jetstream.KeyValueEntry) {
	if e == nil {
		kw.ready = true
	} else {
		if kw.queue == nil {
			kw.queue = map[string]entry{}
		}
		id := strings.TrimPrefix(e.Key(), kw.key+".")
		kw.maxRev = max(kw.maxRev, e.Revision())
		if e.Operation() == jetstream.KeyValuePut {
			var rec record
			en := entry{token: e.Revision(), rev: e.Revision()}
			if json.Unmarshal(e.Value(), &rec) != nil || rec.Owner == "" {
				en.foreign = true
			}
			en.owner, en.permits, en.meta = rec.Owner, rec.Permits, rec.Meta
			if rec.TTL > 0 {
				en.ends = e.Created().Add(time.Duration(rec.TTL) * time.Millisecond)
			}
			if rec.Token != 0 {
				en.token = rec.Token
			}
			kw.queue[id] = en
		} else {
			delete(kw.queue, id)
		}
		for _, h := range kw.holds {
			if h.hold.sub != id || h.releasing {
				continue
			}
			if en, ok := kw.queue[id]; ok && en.owner == h.owner && en.token == h.hold.token {
				continue // its own renewal
			}
			h.Lose(errGone)
		}
	}
	for _, w := range kw.waiters {
		notify(w.wake)
	}
}

// standing returns how many live entries precede token in the queue, the
// time left of the soonest to end of the first permits entries (the
// holders; -1 when unknown), whether the queue holds foreign data, and the
// permits of an entry written for another number of them (0 when none);
// d.mu is held.
func (kw *keyWatch) standing(token uint64, permits int) (ahead int, left time.Duration, foreign bool, other int) {
	ens := make([]entry, 0, len(kw.queue))
	for _, en := range kw.queue {
		ens = append(ens, en)
		foreign = foreign || en.foreign
		if n := max(en.permits, 1); !en.foreign && n != permits {
			other = n
		}
		if en.token < token {
			ahead++
		}
	}
	slices.SortFunc(ens, func(a, b entry) int { return cmp.Compare(a.token, b.token) })
	left = -1
	for _, en := range ens[:min(permits, len(ens))] {
		if l := max(time.Until(en.ends), 0); !en.ends.IsZero() && (left < 0 || l < left) {
			left = l
		}
	}
	return ahead, left, foreign, other
}

// queueConflict is the error of a call that found key's queue holding
// foreign data (other 0) or an entry written for other permits.
func (d *Driver) queueConflict(key string, other int) error {
	if other == 0 {
		return fmt.Errorf("%w: natslock: the queue of %q holds a value that is not a dlock entry", driver.ErrConflict, key)
	}
	return fmt.Errorf("%w: natslock: %q is used with %d permits, not %d", driver.ErrConflict, key, other, d.permits)
}

// recordPermits is the Permits of the Driver's entries' records: 0 for one.
func (d *Driver) recordPermits() int {
	if d.permits > 1 {
		return d.permits
	}
	return 0
}

// pendingEntry returns the entry of owner's acquisition of key, made (with
// a new id) at its first attempt.
func (d *Driver) pendingEntry(key, owner string) *queueEntry {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := key + "\x00" + owner
	qe := d.pending[k]
	if qe == nil {
		qe = &queueEntry{key: key, owner: owner, id: newID()}
		d.pending[k] = qe
	}
	return qe
}

// dropPending forgets the entry of owner's acquisition of key.
func (d *Driver) dropPending(key, owner string) {
	d.mu.Lock()
	delete(d.pending, key+"\x00"+owner)
	d.mu.Unlock()
}

// newID returns a random id of a queue entry.
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Acquire implements driver.Driver: the acquisition's entry written into the
// key's queue with the TTL (or rewritten, keeping its place, on a later
// attempt), and then, once the key's watch has delivered it, a grant if it
// heads the queue. A TryLock whose entry does not head the queue removes it;
// a Lock's attempt waits in the Driver for its entry to head the queue, for
// at most half the TTL.
func (f *FairDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	d := f.drv()
	if _, err := d.open(ctx, r.Key); err != nil {
		return driver.Grant{}, err
	}
	qe := d.pendingEntry(r.Key, r.Owner)
	if err := f.write(ctx, qe, r.TTL, r.Metadata); err != nil {
		return driver.Grant{}, err
	}
	kw, w, leave := d.awaitQueue(r.Key)
	defer leave()
	patience := d.cfg.requestTimeout // for the watch to deliver the entry
	if r.Waiting {
		patience = r.TTL / 2 // for the entry to head the queue
	}
	timer := time.NewTimer(patience)
	defer timer.Stop()
	queued := &driver.Taken{Remaining: -1, Queued: true, Handle: qe, RetryAfter: time.Millisecond}
	for {
		d.mu.Lock()
		known := kw.ready && kw.maxRev >= qe.rev
		en, live := kw.queue[qe.id]
		ahead, left, foreign, other := kw.standing(qe.token, d.permits)
		d.mu.Unlock()
		switch {
		case !known:
		case foreign || other != 0:
			_ = f.purge(ctx, qe, releasedTTL)
			return driver.Grant{}, d.queueConflict(r.Key, other)
		case !live || en.owner != r.Owner:
			// Forced or expired meanwhile: the next attempt queues anew.
			d.dropPending(r.Key, r.Owner)
			return driver.Grant{}, &driver.Taken{Remaining: -1, RetryAfter: time.Millisecond}
		case ahead < d.permits:
			d.dropPending(r.Key, r.Owner)
			return d.grantHold(r.Key, r.Owner, &hold{sub: qe.id, token: qe.token, rev: qe.rev, meta: r.Metadata}), nil
		case !r.Waiting:
			if err := f.purge(ctx, qe, releasedTTL); err != nil {
				return driver.Grant{}, err
			}
			return driver.Grant{}, &driver.Taken{Remaining: left}
		}
		select {
		case _, ok := <-w.wake:
			if ok {
				continue
			}
		case <-timer.C:
		case <-ctx.Done():
		}
		// Out of patience, or the watch broke.
		if r.Waiting {
			return driver.Grant{}, queued
		}
		if err := ctx.Err(); err != nil {
			return driver.Grant{}, fmt.Errorf("natslock: acquire: %w", err)
		}
		if err := f.purge(ctx, qe, releasedTTL); err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{}, errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: the watch of %q did not deliver the queue in %v", r.Key, patience))
	}
}

// awaitQueue registers a waiter of the Driver's watch of key's queue, woken
// by every change of the queue (its channel is closed when the watch
// breaks), until leave.
func (d *Driver) awaitQueue(key string) (kw *keyWatch, w *waiter, leave func()) {
	w = &waiter{wake: make(chan struct{}, 1)}
	d.mu.Lock()
	kw = d.use(key)
	kw.waiters = append(kw.waiters, w)
	d.mu.Unlock()
	return kw, w, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if i := slices.Index(kw.waiters, w); i >= 0 {
			kw.waiters = slices.Delete(kw.waiters, i, i+1)
			kw.unused()
		}
	}
}

// write publishes the acquisition's entry with ttl at its last revision (a
// new entry when it has none), and takes up an earlier write of its own
// whose reply was lost. An entry that is gone (expired, forced) is written
// anew under a new id, at the end of the queue.
func (f *FairDriver) write(ctx context.Context, qe *queueEntry, ttl time.Duration, meta string) error {
	d := f.d
	b, err := d.openBucket(ctx)
	if err != nil {
		return err
	}
	for range 3 {
		value, err := json.Marshal(record{Owner: qe.owner, Token: qe.token, Meta: meta, TTL: ttl.Milliseconds(), Permits: d.recordPermits()})
		if err != nil {
			return fmt.Errorf("%w: natslock: metadata: %w", driver.ErrInvalid, err)
		}
		rev, err := d.publish(ctx, d.pre+qe.subject(), value, qe.rev, ttl)
		if err == nil {
			if qe.token == 0 {
				qe.token = rev
			}
			qe.rev = rev
			return nil
		}
		if !wrongLast(err) {
			return d.mapErr(ctx, "enqueue", err)
		}
		m, err := d.lastMsg(ctx, b, d.pre+qe.subject())
		if err != nil {
			return err
		}
		if m != nil && !marker(m) {
			rec, err := decode(m)
			if err != nil {
				return err
			}
			if rec.Owner == qe.owner {
				// An earlier write of ours landed.
				qe.token, qe.rev = rec.Token, m.Sequence
				if qe.token == 0 {
					qe.token = m.Sequence
				}
				continue
			}
		}
		qe.id, qe.token, qe.rev = newID(), 0, 0
	}
	return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: the queue entry of %q changed at every attempt to write it", qe.key))
}

// purge replaces the entry with a marker that the server removes ttl later,
// if its last revision is still qe.rev, and forgets it.
func (f *FairDriver) purge(ctx context.Context, qe *queueEntry, ttl time.Duration) error {
	if err := f.d.purgeAt(ctx, qe.subject(), qe.rev, ttl); err != nil {
		return f.d.mapErr(ctx, "dequeue", err)
	}
	f.d.dropPending(qe.key, qe.owner)
	return nil
}

// purgeAt writes a purge marker with a TTL of ttl to key (an entry's key),
// if its last message is expect (none when 0).
func (d *Driver) purgeAt(ctx context.Context, key string, expect uint64, ttl time.Duration) error {
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	m := nats.NewMsg(d.pre + key)
	m.Header.Set("KV-Operation", "PURGE")
	_, err := d.js.PublishMsg(rctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(ttl))
	return err
}

// Extend implements driver.Driver: the holder's entry written again with
// the TTL anew, only if its last revision is the holder's last one.
func (f *FairDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	d := f.drv()
	if _, err := d.open(ctx, h.Key); err != nil {
		return 0, err
	}
	hd, ok := h.Handle.(*hold)
	if !ok {
		return 0, notHeld(h.Key)
	}
	return d.extend(ctx, h.Key+"."+hd.sub, h.Owner, hd, ttl)
}

// Release implements driver.Driver: the holder's entry replaced by a
// marker, only if its last revision is the holder's last one.
func (f *FairDriver) Release(ctx context.Context, h driver.Holding) error {
	d := f.drv()
	if _, err := d.open(ctx, h.Key); err != nil {
		return err
	}
	hd, ok := h.Handle.(*hold)
	if !ok {
		return f.Abandon(ctx, h)
	}
	sub := h.Key + "." + hd.sub
	d.releasing(hd, true)
	for range 2 {
		err := d.purgeAt(ctx, sub, hd.revision(), releasedTTL)
		if err == nil {
			return nil
		}
		if !wrongLast(err) {
			d.releasing(hd, false)
			return d.mapErr(ctx, "release", err)
		}
		if !d.refresh(ctx, sub, h.Owner, hd) {
			break
		}
	}
	d.releasing(hd, false)
	return notHeld(h.Key)
}

// Abandon implements driver.Abandoner: the acquisition's entry, if it is in
// the queue, replaced by a marker; if it is not, a marker where it would be,
// so that a write of it still on its way is refused (the marker stays
// DefaultMarkerTTL).
func (f *FairDriver) Abandon(ctx context.Context, h driver.Holding) error {
	d := f.drv()
	b, err := d.open(ctx, h.Key)
	if err != nil {
		return err
	}
	d.mu.Lock()
	qe := d.pending[h.Key+"\x00"+h.Owner]
	d.mu.Unlock()
	if qe == nil {
		if qe, _ = h.Handle.(*queueEntry); qe == nil {
			return nil
		}
	}
	for range 3 {
		m, err := d.lastMsg(ctx, b, d.pre+qe.subject())
		if err != nil {
			return err
		}
		var expect uint64
		if m != nil {
			if marker(m) {
				d.dropPending(qe.key, qe.owner)
				return nil
			}
			if rec, err := decode(m); err != nil || rec.Owner != qe.owner {
				d.dropPending(qe.key, qe.owner)
				return err
			}
			expect = m.Sequence
		}
		qe.rev = expect
		if err := f.purge(ctx, qe, DefaultMarkerTTL); err == nil || !wrongLast(err) {
			return err
		}
	}
	return errors.Join(driver.ErrUnavailable, fmt.Errorf("natslock: the queue entry of %q changed at every attempt to remove it", h.Key))
}

// TTL implements driver.Driver: the time left of the holder's entry, as its
// timestamp (the server's clock) and TTL say.
func (f *FairDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	d := f.drv()
	b, err := d.open(ctx, h.Key)
	if err != nil {
		return 0, err
	}
	hd, ok := h.Handle.(*hold)
	if !ok {
		return 0, notHeld(h.Key)
	}
	m, err := d.lastMsg(ctx, b, d.pre+h.Key+"."+hd.sub)
	if err != nil {
		return 0, err
	}
	if m == nil || marker(m) {
		return 0, notHeld(h.Key)
	}
	if rec, err := decode(m); err != nil || rec.Owner != h.Owner {
		return 0, notHeld(h.Key)
	}
	return max(remaining(m), 0), nil
}

// Subscribe implements driver.Notifier: a Lock's attempts wait in Acquire
// for their entry to head the queue, so that a waiter is woken at once to
// make its next attempt.
func (f *FairDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if _, err := f.drv().open(ctx, h.Key); err != nil {
		return nil, nil, err
	}
	c := make(chan struct{}, 1)
	c <- struct{}{}
	return c, func() {}, nil
}
