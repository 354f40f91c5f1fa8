// Package natslock is dlock's NATS backend: exclusive leases with fencing
// tokens in a JetStream key-value bucket, through the caller's connection
// (nats.go's jetstream package). It is a module of its own, so that programs
// using other backends never build nats.go.
//
//	nc, _ := nats.Connect("nats://127.0.0.1:4222")
//	js, _ := jetstream.New(nc)
//	d, _ := natslock.NewDriver(js)
//	_ = d.Migrate(ctx) // once: creates the bucket with per-key TTLs
//	locker, _ := natslock.NewClient(d)
//	lease, err := locker.Lock(ctx, "orders.42")
//
// # Layout
//
// Every lock is one key of a bucket (DefaultBucket unless WithBucket says
// otherwise) whose stream keeps one message per key (history 1) and allows
// per-message TTLs, with a limit marker TTL (the bucket's LimitMarkerTTL), so
// that the server writes a marker when a key's TTL runs out. The key's value
// names the holder (its owner token, fencing token and metadata, as JSON).
//
// Acquire publishes the value with the key's TTL, on the condition that the
// key's last message is the one the Driver last saw (none, a delete marker, a
// TTL marker): JetStream's expected-last-subject-sequence check, so that a key
// is created only where it is free. Its revision (the message's stream
// sequence) is the fencing token. Extend publishes the value again, with the
// TTL anew, on the condition that the key's last message is the holder's own
// last one; Release publishes a delete marker on the same condition. The
// server alone expires a key whose TTL has run out (TTLs count whole seconds
// of the server's clock), and writes its marker.
//
// # Waiting and loss
//
// A Driver keeps one watch (an ordered consumer) per key that it holds or
// waits for, and drops it a second after its last use. A deletion, purge or
// TTL marker of the key wakes the Driver's waiters of the key; a message of
// the key written after a holder's grant that is not the holder's own renewal
// (a force-unlock, a purge, an expiry, somebody else's write) tells the holder
// at once that its lease is lost. Waiters of different Drivers are woken by
// the same deletion, each Driver's first waiter: a hand-over costs one
// attempt per Driver that waits. A Driver that releases a key that its own
// attempts lately found held leaves it, for a round trip and a half, to the
// waiters its release woke (a Lock of the key from that Driver meanwhile is
// told the key is busy and waits for the next wake-up), so that a contended
// key changes hands instead of going back to the process a round trip ahead
// of every waiter.
//
// # Fair locks
//
// NewFair and NewFairDriver make locks granted in arrival order, in a bucket
// of their own (DefaultFairBucket): every acquisition writes an entry into
// the key's queue, and the entry with the lowest first revision holds the
// lock, which its Driver learns from its watch of the queue without writing
// anything. A hand-over is the holder's release alone and wakes the next
// entry's process only (see FairDriver). NewSemaphore and
// NewSemaphoreDriver make semaphores of n permits, the same queue whose
// first n live entries hold (see SemaphoreDriver).
//
// # What is guaranteed
//
// JetStream orders every write of a stream, so a key has at most one live
// holder, and revisions increase strictly as long as the stream keeps its
// acknowledged writes. It keeps them through a crash of the machine only with
// sync on every write (the server's jetstream sync_interval: always) and three
// replicas: see docs/safety.md. The Driver checks at its first use what a
// client can see (the server's version, the bucket's TTL settings, its storage
// and persist mode) and refuses a bucket that cannot keep a lock (ErrNoKeyTTL,
// ErrOldServer, ErrNotDurable); the server's sync setting is not visible to a
// client.
package natslock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultBucket names the key-value bucket a Driver locks in when
// WithBucket is not given.
const DefaultBucket = "dlock"

// DefaultRequestTimeout is how long a Driver waits for the server's answer
// to one request when WithRequestTimeout is not given.
const DefaultRequestTimeout = 5 * time.Second

// DefaultMarkerTTL is the LimitMarkerTTL of a bucket that Migrate creates:
// how long the server keeps the marker it writes when a key's TTL runs out.
const DefaultMarkerTTL = time.Minute

// MaxKeyLen is the longest lock key the Driver accepts, in bytes: a subject
// of the bucket must fit a NATS control line with room to spare.
const MaxKeyLen = 512

// Driver is the driver.Driver of a JetStream key-value bucket. It is also a
// driver.Notifier, a driver.BatchExtender, a driver.TTLLimiter and a
// driver.Inspector. It holds no connection of its own: the caller creates the
// connection, shares it, and closes it after the last lock is released (and
// after Close). It is safe for concurrent use.
type Driver struct {
	js  jetstream.JetStream
	cfg options
	pre string // the subjects' prefix: "$KV.<bucket>."

	openMu sync.Mutex
	opened *bucket // set once the bucket was checked

	mu      sync.Mutex
	watches map[string]*keyWatch
	last    map[string]uint64 // the last revision seen of a key, for the next create
	// lastEpoch is the connection's reconnect count when last was filled:
	// a reconnection may follow a restart that lost writes (the default
	// sync), after which a revision remembered from before may name another
	// message; last is dropped then.
	lastEpoch uint64

	rtt atomic.Int64 // a moving average of a write's round trip, in ns

	fair    bool                   // a FairDriver's: keys are queues of entries
	permits int                    // a queue's holders: 1 for a FairDriver, n for a SemaphoreDriver
	kind    string                 // a queue's kind of lock: driver.KindFair or KindSemaphore
	pending map[string]*queueEntry // a fair Driver's entries not granted yet, by key and owner
}

// bucket is what the first use of a Driver found and checked.
type bucket struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream
}

var (
	_ driver.Driver        = (*Driver)(nil)
	_ driver.Notifier      = (*Driver)(nil)
	_ driver.Inspector     = (*Driver)(nil)
	_ driver.TTLLimiter    = (*Driver)(nil)
	_ driver.BatchExtender = (*Driver)(nil)
	_ driver.KeyWatcher    = (*Driver)(nil)
)

// Client is what New and NewClient return: the dlock.Client over a Driver,
// a dlock.Locker that inspects and forces locks through the Driver.
type Client = dlock.Client

// New returns a Client over a Driver without options (locking in the
// DefaultBucket of js's account); opts are the defaults of its TryLock and
// Lock calls. Nothing is sent to the server: Driver.Migrate creates the
// bucket. A nil js or a bad option gives an error matching dlock.ErrInvalid.
func New(js jetstream.JetStream, opts ...dlock.Option) (*Client, error) {
	d, err := NewDriver(js)
	if err != nil {
		return nil, err
	}
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, a Driver that NewDriver made with its
// own options; opts are the defaults of its TryLock and Lock calls. Nothing
// is sent to the server. A nil d or a bad option gives an error matching
// dlock.ErrInvalid.
func NewClient(d *Driver, opts ...dlock.Option) (*Client, error) {
	if d == nil {
		return nil, errNilDriver
	}
	return dlock.NewClient(d, opts...)
}

// NewDriver returns a Driver over js, set up by opts. Nothing is sent to the
// server until its first call, which checks the bucket (see Check). A nil
// js or a bad option gives an error matching dlock.ErrInvalid.
func NewDriver(js jetstream.JetStream, opts ...Option) (*Driver, error) {
	if js == nil || js.Conn() == nil {
		return nil, fmt.Errorf("%w: natslock: nil JetStream", driver.ErrInvalid)
	}
	cfg := options{bucket: DefaultBucket, requestTimeout: DefaultRequestTimeout, replicas: 1}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: natslock: nil option", driver.ErrInvalid)
		}
		o(&cfg)
	}
	if cfg.requestTimeout <= 0 {
		return nil, fmt.Errorf("%w: natslock: request timeout %v is not positive", driver.ErrInvalid, cfg.requestTimeout)
	}
	if !bucketName(cfg.bucket) {
		return nil, fmt.Errorf("%w: natslock: bucket %q: 1 to 64 of letters, digits, '-' and '_'", driver.ErrInvalid, cfg.bucket)
	}
	if cfg.replicas < 1 || cfg.replicas > 5 {
		return nil, fmt.Errorf("%w: natslock: %d replicas: want 1 to 5", driver.ErrInvalid, cfg.replicas)
	}
	return &Driver{js: js, cfg: cfg, pre: "$KV." + cfg.bucket + ".", watches: map[string]*keyWatch{}, last: map[string]uint64{}}, nil
}

// bucketName reports whether name is a bucket name NATS accepts.
func bucketName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// TTLLimits implements driver.TTLLimiter: JetStream's message TTLs count whole
// seconds, from one second.
func (d *Driver) TTLLimits() driver.TTLLimits {
	return driver.TTLLimits{Min: time.Second, Max: driver.MaxTTL, Step: time.Second}
}

// Info implements driver.Driver: the mutex of NATS.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "natslock", Kind: driver.KindMutex}
}

// record is a key's value while it is held.
type record struct {
	Owner string `json:"owner"`
	Token uint64 `json:"token,omitempty"` // 0 in the first message: its own revision
	Meta  string `json:"meta,omitempty"`
	TTL   int64  `json:"ttl_ms,omitempty"` // a fair lock's entry: its TTL, for the waiters' view of the holder
	// Permits is a semaphore entry's number of permits (omitted for 1).
	Permits int `json:"n,omitempty"`
}

// hold is the Driver's state of one holding (Grant.Handle): the revision of
// the holder's last message of the key.
type hold struct {
	sub   string // a fair lock's: the id of the holder's entry in the key's queue
	mu    sync.Mutex
	token uint64
	rev   uint64
	// epoch is the connection's reconnect count before the request that
	// wrote or read rev was sent (see current).
	epoch uint64
	meta  string
	sig   *holdSignal
}

func (h *hold) revision() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// setRevision takes rev, written by a request sent at epoch ep, as the
// holding's last revision if it is later than the one it has.
func (h *hold) setRevision(rev, ep uint64) {
	h.mu.Lock()
	if rev > h.rev {
		h.rev, h.epoch = rev, ep
	}
	h.mu.Unlock()
}

// current checks, before a conditional write of the plain lock's holding hd
// expects its revision, that the revision still names the holder's message:
// when the connection reconnected since the revision was written or read,
// the server may have restarted having lost writes (the default sync), and
// handed the same revision out again to another owner's grant, which the
// write would then overwrite or delete. The key's last message is read then,
// and the holding goes on with its revision if it is still the holder's,
// with its token; otherwise it is not held. No read is made while the
// connection has not reconnected.
func (d *Driver) current(ctx context.Context, key, owner string, hd *hold) error {
	if hd.sub != "" {
		return nil // a queue entry's: its writes name the entry's own subject
	}
	ep := d.epoch()
	hd.mu.Lock()
	same := hd.epoch == ep
	hd.mu.Unlock()
	if same {
		return nil
	}
	rec, rev, err := d.holding(ctx, key)
	if err != nil {
		return d.mapErr(ctx, "read", err)
	}
	if rec == nil || rec.Owner != owner || rec.Token != hd.token {
		return notHeld(key)
	}
	hd.mu.Lock()
	hd.rev, hd.epoch = rev, ep
	hd.mu.Unlock()
	return nil
}

// epoch returns how often the Driver's connection has reconnected.
func (d *Driver) epoch() uint64 {
	nc := d.js.Conn()
	if nc == nil {
		return 0
	}
	return nc.Stats().Reconnects
}

// CheckKey returns an error matching dlock.ErrInvalid (and ErrBadKey) unless
// key is a lock key that a NATS key-value bucket can hold: 1 to MaxKeyLen
// bytes of letters, digits, '-', '_', '/', '=' and '.', neither starting nor
// ending with '.', without "..". Every call of the Driver checks its key
// before any I/O.
func CheckKey(key string) error {
	switch {
	case key == "":
		return badKey(key, "empty")
	case len(key) > MaxKeyLen:
		return badKey(key, fmt.Sprintf("%d bytes, more than %d", len(key), MaxKeyLen))
	case key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, ".."):
		return badKey(key, "a '.' at either end or two in a row (an empty subject token)")
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_/=.", c) >= 0) {
			return badKey(key, fmt.Sprintf("%q is not one of letters, digits, '-', '_', '/', '=', '.'", c))
		}
	}
	return nil
}

// ErrBadKey is matched (with dlock.ErrInvalid) by the error of a call whose
// lock key a NATS bucket cannot hold (see CheckKey).
var ErrBadKey = errors.New("natslock: key a NATS bucket cannot hold")

func badKey(key, why string) error {
	if len(key) > 80 {
		key = key[:80] + "..."
	}
	return fmt.Errorf("%w: %w: %q: %s", driver.ErrInvalid, ErrBadKey, key, why)
}

// Acquire implements driver.Driver: one conditional publish of the holder's
// value with the TTL where the Driver's last view of the key says it is
// free, and when the key changed since, a read of its last message and at
// most two more attempts. A key held by r.Owner already (an earlier attempt
// whose reply was lost) is taken up again and its TTL reset.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	b, err := d.open(ctx, r.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	subj := d.pre + r.Key
	value, err := json.Marshal(record{Owner: r.Owner, Meta: r.Metadata})
	if err != nil {
		return driver.Grant{}, fmt.Errorf("%w: natslock: metadata: %w", driver.ErrInvalid, err)
	}
	if r.Waiting {
		// A waiter of a key this Driver just released leaves it to the
		// waiters the release woke, for a moment.
		if left := d.yielding(r.Key); left > 0 {
			return driver.Grant{}, &driver.Taken{Remaining: -1, RetryAfter: left, Handle: takenMark{rev: d.lastSeen(r.Key)}}
		}
	}
	expect := d.lastSeen(r.Key)
	for range 3 {
		ep := d.epoch()
		rev, err := d.publish(ctx, subj, value, expect, r.TTL)
		if err == nil {
			d.forget(r.Key)
			return d.grantHold(r.Key, r.Owner, &hold{token: rev, rev: rev, epoch: ep, meta: r.Metadata}), nil
		}
		if !wrongLast(err) {
			return driver.Grant{}, d.mapErr(ctx, "acquire", err)
		}
		ep = d.epoch()
		m, err := d.lastMsg(ctx, b, subj)
		if err != nil {
			return driver.Grant{}, err
		}
		if m == nil || marker(m) {
			expect = 0
			if m != nil {
				expect = m.Sequence
			}
			continue
		}
		rec, err := decode(m)
		if err != nil {
			return driver.Grant{}, err
		}
		if rec.Owner != r.Owner {
			d.contended(r.Key)
			return driver.Grant{}, &driver.Taken{Remaining: remaining(m), RetryAfter: time.Minute, Handle: takenMark{rev: m.Sequence}}
		}
		// Our own earlier attempt landed: reset its TTL.
		token := rec.Token
		if token == 0 {
			token = m.Sequence
		}
		h := &hold{token: token, rev: m.Sequence, epoch: ep, meta: r.Metadata}
		if _, err := d.extend(ctx, r.Key, r.Owner, h, r.TTL); err != nil {
			return driver.Grant{}, err
		}
		return d.grantHold(r.Key, r.Owner, h), nil
	}
	return driver.Grant{}, &driver.Taken{Remaining: -1}
}

func (d *Driver) grantHold(key, owner string, h *hold) driver.Grant {
	g := driver.Grant{Token: h.token, Handle: h}
	if sig := d.watchHold(key, owner, h); sig != nil {
		g.Lost = &sig.LossSignal
	}
	return g
}

// Extend implements driver.Driver: the holder's value published again with
// the TTL anew, only if the key's last message is the holder's last one.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if _, err := d.open(ctx, h.Key); err != nil {
		return 0, err
	}
	hd, ok := h.Handle.(*hold)
	if !ok {
		return 0, notHeld(h.Key)
	}
	return d.extend(ctx, h.Key, h.Owner, hd, ttl)
}

func (d *Driver) extend(ctx context.Context, key, owner string, hd *hold, ttl time.Duration) (time.Duration, error) {
	rec := record{Owner: owner, Token: hd.token, Meta: hd.meta}
	if d.fair {
		rec.TTL, rec.Permits = ttl.Milliseconds(), d.recordPermits()
	}
	value, err := json.Marshal(rec)
	if err != nil {
		return 0, fmt.Errorf("%w: natslock: metadata: %w", driver.ErrInvalid, err)
	}
	subj := d.pre + key
	if err := d.current(ctx, key, owner, hd); err != nil {
		return 0, err
	}
	for range 2 {
		ep := d.epoch()
		rev, err := d.publish(ctx, subj, value, hd.revision(), ttl)
		if err == nil {
			hd.setRevision(rev, ep)
			return ttl, nil
		}
		if !wrongLast(err) {
			return 0, d.mapErr(ctx, "extend", err)
		}
		// An earlier renewal whose reply was lost may have landed.
		if !d.refresh(ctx, key, owner, hd) {
			return 0, notHeld(key)
		}
	}
	return 0, notHeld(key)
}

// refresh reads the key's last message and, when it is still the holding of
// owner with hd's token (a renewal whose reply was lost landed), takes its
// revision; it reports whether it did.
func (d *Driver) refresh(ctx context.Context, key, owner string, hd *hold) bool {
	ep := d.epoch()
	token, rev, ok := d.ownerHolds(ctx, key, owner)
	if !ok || token != hd.token || rev <= hd.revision() {
		return false
	}
	hd.setRevision(rev, ep)
	return true
}

// ownerHolds reads the key's last message and reports whether owner holds
// the key, with its token and the message's revision.
func (d *Driver) ownerHolds(ctx context.Context, key, owner string) (token, rev uint64, ok bool) {
	rec, rev, err := d.holding(ctx, key)
	if err != nil || rec == nil || rec.Owner != owner {
		return 0, 0, false
	}
	return rec.Token, rev, true
}

// holding reads the key's last message and returns the record of its
// holder, its Token set (the message's own revision in a first message),
// and the message's revision; a nil record when the key is free.
func (d *Driver) holding(ctx context.Context, key string) (*record, uint64, error) {
	b, err := d.open(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	m, err := d.lastMsg(ctx, b, d.pre+key)
	if err != nil || m == nil || marker(m) {
		return nil, 0, err
	}
	rec, err := decode(m)
	if err != nil {
		return nil, 0, err
	}
	if rec.Token == 0 {
		rec.Token = m.Sequence
	}
	return &rec, m.Sequence, nil
}

// Release implements driver.Driver: a delete marker, only if the key's last
// message is the holder's last one.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	if _, err := d.open(ctx, h.Key); err != nil {
		return err
	}
	hd, ok := h.Handle.(*hold)
	if !ok {
		// A Release without a grant (an acquisition whose outcome is
		// unknown): the key's holding if it is the owner's.
		ep := d.epoch()
		token, rev, ok := d.ownerHolds(ctx, h.Key, h.Owner)
		if !ok {
			return notHeld(h.Key)
		}
		hd = &hold{token: token, rev: rev, epoch: ep}
	}
	if err := d.current(ctx, h.Key, h.Owner, hd); err != nil {
		return err
	}
	d.releasing(hd, true)
	for range 2 {
		rev, err := d.del(ctx, h.Key, hd.revision(), false)
		if err == nil {
			d.seen(h.Key, rev)
			d.released(h.Key)
			return nil
		}
		if !wrongLast(err) {
			d.releasing(hd, false)
			return d.mapErr(ctx, "release", err)
		}
		if !d.refresh(ctx, h.Key, h.Owner, hd) {
			break
		}
	}
	d.releasing(hd, false)
	return notHeld(h.Key)
}

// TTL implements driver.Driver: the time left of the key's last message, as
// its timestamp (the server's clock) and TTL say, if it is the holder's.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	b, err := d.open(ctx, h.Key)
	if err != nil {
		return 0, err
	}
	m, err := d.lastMsg(ctx, b, d.pre+h.Key)
	if err != nil {
		return 0, err
	}
	if m == nil || marker(m) {
		return 0, notHeld(h.Key)
	}
	rec, err := decode(m)
	if err != nil {
		return 0, err
	}
	if rec.Owner != h.Owner {
		return 0, notHeld(h.Key)
	}
	return max(remaining(m), 0), nil
}

// publish writes value to subj with ttl if the subject's last message is
// expect (none when 0), and returns the new message's revision.
func (d *Driver) publish(ctx context.Context, subj string, value []byte, expect uint64, ttl time.Duration) (uint64, error) {
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	m := &nats.Msg{Subject: subj, Data: value, Header: nats.Header{}}
	start := time.Now()
	ack, err := d.js.PublishMsg(rctx, m, jetstream.WithExpectLastSequencePerSubject(expect), jetstream.WithMsgTTL(ttl))
	d.roundTrip(time.Since(start))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// del writes a delete marker (a purge marker when purge is set) of key if
// its last message is expect (any when 0 and purge), and returns the
// marker's revision.
func (d *Driver) del(ctx context.Context, key string, expect uint64, purge bool) (uint64, error) {
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	m := nats.NewMsg(d.pre + key)
	var opts []jetstream.PublishOpt
	if purge {
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	} else {
		m.Header.Set("KV-Operation", "DEL")
	}
	if expect != 0 || !purge {
		opts = append(opts, jetstream.WithExpectLastSequencePerSubject(expect))
	}
	ack, err := d.js.PublishMsg(rctx, m, opts...)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// lastMsg reads the last message of subj, nil when it has none.
func (d *Driver) lastMsg(ctx context.Context, b *bucket, subj string) (*jetstream.RawStreamMsg, error) {
	rctx, cancel := d.requestCtx(ctx)
	defer cancel()
	m, err := b.stream.GetLastMsgForSubject(rctx, subj)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, d.mapErr(ctx, "read", err)
	}
	return m, nil
}

// requestCtx bounds one request by the request timeout.
func (d *Driver) requestCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d.cfg.requestTimeout {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d.cfg.requestTimeout)
}

// marker reports whether m is a deletion, a purge or a TTL marker: the key is
// free.
func marker(m *jetstream.RawStreamMsg) bool {
	return m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != ""
}

// decode reads a held key's value; another value is ErrConflict.
func decode(m *jetstream.RawStreamMsg) (record, error) {
	var rec record
	if err := json.Unmarshal(m.Data, &rec); err != nil || rec.Owner == "" {
		return record{}, fmt.Errorf("%w: natslock: %s holds a value that is not a dlock lock", driver.ErrConflict, m.Subject)
	}
	return rec, nil
}

// remaining is the time left of m's TTL, by its timestamp; -1 when unknown.
func remaining(m *jetstream.RawStreamMsg) time.Duration {
	ttl, err := time.ParseDuration(m.Header.Get(jetstream.MsgTTLHeader))
	if err != nil || ttl <= 0 {
		return -1
	}
	return min(max(ttl-time.Since(m.Time), 0), ttl)
}

// lastSeen returns the revision of the key's last message as the Driver saw
// it last (its own release, a watch), 0 when unknown.
func (d *Driver) lastSeen(key string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastFresh()
	return d.last[key]
}

// lastFresh drops the remembered revisions when the connection reconnected
// since they were seen; d.mu is held.
func (d *Driver) lastFresh() {
	nc := d.js.Conn()
	if nc == nil {
		return
	}
	if n := nc.Stats().Reconnects; n != d.lastEpoch {
		clear(d.last)
		d.lastEpoch = n
	}
}

// maxLast bounds the revisions the Driver remembers.
const maxLast = 4096

// seen remembers rev as the key's last message.
func (d *Driver) seen(key string, rev uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastFresh()
	if _, ok := d.last[key]; !ok && len(d.last) >= maxLast {
		for k := range d.last {
			delete(d.last, k)
			break
		}
	}
	if rev > d.last[key] {
		d.last[key] = rev
	}
}

// forget drops what the Driver remembers of the key's last message: it is
// held now.
func (d *Driver) forget(key string) {
	d.mu.Lock()
	delete(d.last, key)
	d.mu.Unlock()
}

// notHeld is the error of a call about a holding that is gone.
func notHeld(key string) error {
	return fmt.Errorf("%w: natslock: %q is not held by this owner", driver.ErrNotHeld, key)
}

var errNilDriver = fmt.Errorf("%w: natslock: nil driver", driver.ErrInvalid)
