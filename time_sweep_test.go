package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

// The time sweep: the Client's timing arithmetic (the local deadline and its
// drift margin, the renewer, WithMaxHold, the failure limit) checked exactly on
// the fake clock of a synctest bubble, over a driver whose every call takes a
// configurable round trip of that clock and which keeps the store's side of
// time: when each holding expires as the store counts it. No test here sleeps
// in real time.

// sweepFault is what happens to a request.
type sweepFault int

const (
	faultNone      sweepFault = iota
	faultFail                 // the request never reaches the store: ErrUnavailable after the round trip
	faultLostReply            // the store applies it, the reply is lost: ErrUnavailable after the round trip
	faultHang                 // the store applies it, and no reply comes until the call's context ends
)

func (f sweepFault) String() string {
	return [...]string{"ok", "fail", "lost-reply", "hang"}[f]
}

// sweepDriver is a driver.Driver of keys in memory, for a test in a
// synctest bubble. Each call takes rtt on the bubble's clock, before*rtt of it
// on the way to the store; the store applies requests on its own clock, which
// runs rate times as fast as the client's and counts in whole multiples of
// prec: a holding granted or extended at t with ttl expires at t rounded down
// to prec, plus ttl/rate.
type sweepDriver struct {
	lim    driver.TTLLimits
	rtt    time.Duration
	before float64
	rate   float64
	prec   time.Duration

	batch        bool                               // the driver has ExtendMany (see sweepBatch)
	extendFault  func(key string, n int) sweepFault // the fault of the n-th Extend of key (from 1); nil: none
	acquireFault func(now time.Time) sweepFault     // the fault of an Acquire starting at now; nil: none
	busyUntil    time.Time                          // Acquire finds the key held by another owner before then

	mu      sync.Mutex
	cur     map[string]*sweepHolding // the holding the store keeps, by key
	all     map[string]*sweepHolding // every holding, by owner
	token   uint64
	extends map[string]int
	calls   []sweepCall
}

// sweepHolding is one owner's holding as the store sees it.
type sweepHolding struct {
	owner   string
	expires time.Time // by the client's clock
	end     time.Time // when the store stopped holding it (expiry or release); zero while it holds
}

// sweepCall is one driver call as the client made it.
type sweepCall struct {
	op, key    string
	start, ret time.Time
	ttl        time.Duration
	ok         bool
}

func (d *sweepDriver) TTLLimits() driver.TTLLimits { return d.lim }

// Info implements driver.Driver.
func (d *sweepDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "sweep", Kind: driver.KindMutex}
}

// expiry is when a holding given ttl at now expires; d.mu is held.
func (d *sweepDriver) expiry(now time.Time, ttl time.Duration) time.Time {
	return now.Truncate(d.prec).Add(time.Duration(float64(ttl) / d.rate))
}

// live returns the holding the store keeps for key at now, ending the one that
// has expired; d.mu is held.
func (d *sweepDriver) live(key string, now time.Time) *sweepHolding {
	h := d.cur[key]
	if h != nil && !now.Before(h.expires) {
		h.end = h.expires
		delete(d.cur, key)
		return nil
	}
	return h
}

// sleep waits dur on the bubble's clock, or until ctx ends.
func sleep(ctx context.Context, dur time.Duration) error {
	if dur <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errSweepDown = fmt.Errorf("%w: connection reset (injected)", dlock.ErrUnavailable)

// trip makes one round trip: apply runs in the store (d.mu held) when the
// request arrives, and the reply takes the rest of the round trip, or never
// comes with hang; the context's error when it ends first.
func (d *sweepDriver) trip(ctx context.Context, hang bool, apply func(now time.Time)) error {
	there := time.Duration(float64(d.rtt) * d.before)
	if err := sleep(ctx, there); err != nil {
		return err
	}
	d.mu.Lock()
	apply(time.Now())
	d.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return sleep(ctx, d.rtt-there)
}

// record notes a call of op about key that started at start and returns now.
func (d *sweepDriver) record(op, key string, start time.Time, ttl time.Duration, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, sweepCall{op: op, key: key, start: start, ret: time.Now(), ttl: ttl, ok: err == nil})
}

// call makes one round trip of op about key: apply runs in the store when the
// request arrives, unless the fault keeps it away.
func (d *sweepDriver) call(ctx context.Context, op, key string, ttl time.Duration, f sweepFault, apply func(now time.Time) error) error {
	start := time.Now()
	var err error
	terr := d.trip(ctx, f == faultHang, func(now time.Time) {
		err = errSweepDown
		if f != faultFail {
			err = apply(now)
		}
	})
	switch {
	case terr != nil:
		err = terr
	case f == faultLostReply:
		err = errSweepDown
	}
	d.record(op, key, start, ttl, err)
	return err
}

func (d *sweepDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (g driver.Grant, err error) {
	f := faultNone
	if d.acquireFault != nil {
		f = d.acquireFault(time.Now())
	}
	err = d.call(ctx, "acquire", r.Key, r.TTL, f, func(now time.Time) error {
		if now.Before(d.busyUntil) {
			return &driver.Taken{Remaining: d.busyUntil.Sub(now)}
		}
		h := d.live(r.Key, now)
		switch {
		case h != nil && h.owner != r.Owner:
			return &driver.Taken{Remaining: h.expires.Sub(now)}
		case h == nil:
			d.token++
			h = &sweepHolding{owner: r.Owner}
			if d.all == nil {
				d.cur, d.all = map[string]*sweepHolding{}, map[string]*sweepHolding{}
			}
			d.cur[r.Key], d.all[r.Owner] = h, h
		}
		h.expires = d.expiry(now, r.TTL)
		g = driver.Grant{Token: d.token, TTL: r.TTL}
		return nil
	})
	return g, err
}

// faultOf counts an Extend of key and returns its fault.
func (d *sweepDriver) faultOf(key string) sweepFault {
	d.mu.Lock()
	if d.extends == nil {
		d.extends = map[string]int{}
	}
	d.extends[key]++
	n := d.extends[key]
	d.mu.Unlock()
	if d.extendFault == nil {
		return faultNone
	}
	return d.extendFault(key, n)
}

// extendAt extends h in the store at now; d.mu is held.
func (d *sweepDriver) extendAt(now time.Time, h driver.Holding, ttl time.Duration) error {
	cur := d.live(h.Key, now)
	if cur == nil || cur.owner != h.Owner {
		return fmt.Errorf("%w: expired at the store", dlock.ErrNotHeld)
	}
	cur.expires = d.expiry(now, ttl)
	return nil
}

func (d *sweepDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	err := d.call(ctx, "extend", h.Key, ttl, d.faultOf(h.Key), func(now time.Time) error {
		return d.extendAt(now, h, ttl)
	})
	if err != nil {
		return 0, err
	}
	return ttl, nil
}

// sweepBatch is a sweepDriver with ExtendMany: one round trip for a round's
// renewals, each entry with its own fault (a hang holds up the whole round).
type sweepBatch struct{ *sweepDriver }

func (b sweepBatch) ExtendMany(ctx context.Context, reqs []driver.ExtendRequest) []driver.ExtendResult {
	start := time.Now()
	fs := make([]sweepFault, len(reqs))
	hang := false
	for i, r := range reqs {
		fs[i] = b.faultOf(r.Holding.Key)
		hang = hang || fs[i] == faultHang
	}
	res := make([]driver.ExtendResult, len(reqs))
	terr := b.trip(ctx, hang, func(now time.Time) {
		for i, r := range reqs {
			res[i] = driver.ExtendResult{TTL: r.TTL, Err: errSweepDown}
			if fs[i] != faultFail {
				res[i].Err = b.extendAt(now, r.Holding, r.TTL)
			}
			if fs[i] == faultLostReply {
				res[i].Err = errSweepDown
			}
		}
	})
	for i, r := range reqs {
		if terr != nil {
			res[i].Err = terr
		}
		b.record("extend", r.Holding.Key, start, r.TTL, res[i].Err)
	}
	return res
}

func (d *sweepDriver) Release(ctx context.Context, h driver.Holding) error {
	return d.call(ctx, "release", h.Key, h.TTL, faultNone, func(now time.Time) error {
		cur := d.live(h.Key, now)
		if cur == nil || cur.owner != h.Owner {
			return fmt.Errorf("%w: not held", dlock.ErrNotHeld)
		}
		cur.end = now
		delete(d.cur, h.Key)
		return nil
	})
}

func (d *sweepDriver) TTL(ctx context.Context, h driver.Holding) (ttl time.Duration, err error) {
	err = d.call(ctx, "ttl", h.Key, h.TTL, faultNone, func(now time.Time) error {
		cur := d.live(h.Key, now)
		if cur == nil || cur.owner != h.Owner {
			return fmt.Errorf("%w: not held", dlock.ErrNotHeld)
		}
		ttl = cur.expires.Sub(now)
		return nil
	})
	return ttl, err
}

// storeEnd returns when the store stopped holding owner's holding (released
// or expired), or will stop unless extended again.
func (d *sweepDriver) storeEnd(owner string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	h := d.all[owner]
	if h == nil {
		return time.Time{}
	}
	if h.end.IsZero() || h.expires.Before(h.end) {
		return h.expires
	}
	return h.end
}

// storeExpiry returns when owner's holding expired, or would have expired had it
// not been released.
func (d *sweepDriver) storeExpiry(owner string) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.all[owner].expires
}

// callsOf returns the calls of op about key (any key when "") made so far, in
// the order they started.
func (d *sweepDriver) callsOf(op, key string) []sweepCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sweepCall
	for _, c := range d.calls {
		if c.op == op && (key == "" || c.key == key) {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

// margin is the documented drift margin: the drift factor's share of the TTL
// plus DriftFloor.
func margin(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + dlock.DriftFloor
}

// fakeBootClock makes the suspend-aware clock read the bubble's clock for the
// rest of the test, as a host that never sleeps: the real CLOCK_BOOTTIME would
// run on while the fake clock stands still.
func fakeBootClock(t *testing.T) {
	t.Cleanup(dlock.SetBootClock(func() (time.Duration, bool) {
		return time.Duration(time.Now().UnixNano()), true
	}))
}

// watchDone reports on the returned channel the moment l's Done closes.
func watchDone(l *dlock.Lease) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		<-l.Done()
		ch <- time.Now()
	}()
	return ch
}

// sweepClient returns a Client over d with opts, after giving d the defaults
// of the fields it leaves zero: the default TTL limits, a store whose clock
// runs fast by the default drift factor, expiries in whole milliseconds.
func sweepClient(t *testing.T, d *sweepDriver, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	if d.lim == (driver.TTLLimits{}) {
		d.lim = driver.DefaultTTLLimits
	}
	if d.rate == 0 {
		d.rate = 1 + dlock.DefaultDriftFactor
	}
	if d.prec == 0 {
		d.prec = time.Millisecond
	}
	var drv driver.Driver = d
	if d.batch {
		drv = sweepBatch{d}
	}
	cl, err := dlock.NewClient(drv, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// mustTryLock takes key with cl and opts.
func mustTryLock(t *testing.T, cl *dlock.Client, key string, opts ...dlock.Option) *dlock.Lease {
	t.Helper()
	l, err := cl.TryLock(context.Background(), key, opts...)
	if err != nil {
		t.Fatalf("TryLock %s: %v", key, err)
	}
	return l
}

// toldFirst waits at most within for done (l's Done, see watchDone) and, once
// the release that follows a loss has landed, checks that Done fired no later
// than the store let the lock go; what says more on a failure. It returns the
// moment Done fired, or false when l is still held.
func toldFirst(t *testing.T, d *sweepDriver, l *dlock.Lease, done <-chan time.Time, within time.Duration, what func() string) (time.Time, bool) {
	t.Helper()
	select {
	case doneAt := <-done:
		time.Sleep(2 * d.rtt)
		if end := d.storeEnd(l.Owner()); doneAt.After(end) {
			t.Errorf("told late: Done fired %v after the store let the lock go (%s)", doneAt.Sub(end), what())
		}
		return doneAt, true
	case <-time.After(within):
		return time.Time{}, false
	}
}

// renewCase is one point of the renewal sweep.
type renewCase struct {
	ttl, every, rtt time.Duration
	before          float64 // share of the round trip before the store applies
	factor          float64 // the Client's drift factor
	drift           float64 // the store clock's rate minus one
	fault           sweepFault
	from            int // the first Extend the fault hits
}

func (c renewCase) String() string {
	return fmt.Sprintf("ttl=%v/every=%v/rtt=%v/before=%.1f/factor=%v/drift=%+.3f/%v@%d",
		c.ttl, c.every, c.rtt, c.before, c.factor, c.drift, c.fault, c.from)
}

func (c renewCase) valid() time.Duration { return c.ttl - margin(c.ttl, c.factor) }

// renewOutcome is what one run of a renewCase saw.
type renewOutcome struct {
	grantErr error         // TryLock's error
	lost     bool          // Done fired while held
	doneAt   time.Time     // when
	err      error         // the lease's Err then
	storeEnd time.Time     // when the store let the holding go
	expiry   time.Time     // when the holding expired at the store, or would have
	start    time.Time     // the start of the acquisition
	deadline time.Time     // Deadline right after the grant
	acquires []sweepCall   // the driver's calls
	extends  []sweepCall   //
	held     time.Duration // how long the run watched the lease
}

// run acquires a renewing lease under c in a bubble of its own, watches it for
// long enough to see it renewed many times or lost, and unlocks it.
func (c renewCase) run(t *testing.T) (o renewOutcome) {
	synctest.Test(t, func(t *testing.T) {
		fakeBootClock(t)
		ctx := context.Background()
		d := &sweepDriver{rtt: c.rtt, before: c.before, rate: 1 + c.drift}
		if c.fault != faultNone {
			d.extendFault = func(_ string, n int) sweepFault {
				if n >= c.from {
					return c.fault
				}
				return faultNone
			}
		}
		cl := sweepClient(t, d, dlock.WithTTL(c.ttl), dlock.WithAutoRenew(true),
			dlock.WithRenewEvery(c.every), dlock.WithDriftFactor(c.factor))
		o.start = time.Now()
		l, err := cl.TryLock(ctx, "sweep")
		if o.grantErr = err; err != nil {
			return
		}
		o.deadline = l.Deadline()
		done := watchDone(l)
		o.held = max(12*(c.every+c.rtt), 4*c.ttl)
		select {
		case o.doneAt = <-done:
			o.lost = true
			o.err = l.Err()
			time.Sleep(2 * c.rtt) // the release that follows a loss lands
		case <-time.After(o.held):
		}
		o.storeEnd, o.expiry = d.storeEnd(l.Owner()), d.storeExpiry(l.Owner())
		o.acquires, o.extends = d.callsOf("acquire", ""), d.callsOf("extend", "")
		if !o.lost {
			unlocked := time.Now()
			if err := l.Unlock(ctx); err != nil {
				t.Errorf("%v: Unlock of a held lease: %v", c, err)
			}
			// Nothing renews it after Unlock, and the store holds nothing.
			time.Sleep(2 * c.ttl)
			for _, x := range d.callsOf("extend", "") {
				if x.start.After(unlocked) {
					t.Errorf("%v: a renewal started %v after Unlock", c, x.start.Sub(unlocked))
				}
			}
			if end := d.storeEnd(l.Owner()); end.After(unlocked.Add(c.rtt)) {
				t.Errorf("%v: the store held the lock %v after Unlock", c, end.Sub(unlocked))
			}
		}
	})
	return o
}

// expectedDeadlines returns the moments Done may fire at when the lease
// is lost: the start of the last successful round trip plus the validity, the
// client's way, from the calls the driver saw. A reply that lands exactly at the
// deadline may or may not be applied; both are returned.
func expectedDeadlines(calls []sweepCall, valid time.Duration) []time.Time {
	dls := []time.Time{calls[0].start.Add(valid)}
	for _, cl := range calls[1:] {
		if !cl.ok {
			continue
		}
		var next []time.Time
		for _, dl := range dls {
			switch {
			case cl.ret.Before(dl):
				next = append(next, cl.start.Add(valid))
			case cl.ret.Equal(dl):
				next = append(next, dl, cl.start.Add(valid))
			default:
				next = append(next, dl)
			}
		}
		dls = next
	}
	return dls
}

// tellFirst reports how a run broke the "told first" promise, or "" if it kept
// it: a lease that was lost must see Done no later than the store let it go.
func (o renewOutcome) tellFirst() string {
	if o.grantErr != nil || !o.lost {
		return ""
	}
	if o.doneAt.After(o.storeEnd) {
		return fmt.Sprintf("Done fired %v after the grant, %v after the store let the lock go",
			o.doneAt.Sub(o.start), o.doneAt.Sub(o.storeEnd))
	}
	return ""
}

// check checks one run of c against the promises: see TestTimeSweepRenewals.
func (c renewCase) check(t *testing.T, o renewOutcome) {
	t.Helper()
	valid := c.valid()
	if o.grantErr != nil {
		// The grant's reply came back after the validity it counted from the
		// start of the attempt: refused as unavailable.
		if c.rtt < valid || !errors.Is(o.grantErr, dlock.ErrUnavailable) {
			t.Errorf("%v: TryLock: %v", c, o.grantErr)
		}
		return
	}
	if c.rtt >= valid {
		t.Errorf("%v: granted although the reply came %v after the start, past the validity %v", c, c.rtt, valid)
	}
	if want := o.start.Add(valid); !o.deadline.Equal(want) {
		t.Errorf("%v: Deadline %v after the start, want the TTL minus the drift margin, %v", c, o.deadline.Sub(o.start), valid)
	}
	if msg := o.tellFirst(); msg != "" {
		t.Errorf("%v: told late: %s", c, msg)
	}
	// The watchdog starts the next renewal its interval after the last one's
	// reply: with no fault, each renewal's reply comes 2 round trips and an
	// interval after the start of the one before.
	keeps := c.fault == faultNone && 2*c.rtt+c.every < valid
	loses := c.fault != faultNone || 2*c.rtt+c.every > valid
	switch {
	case keeps && o.lost:
		t.Errorf("%v: lost after %v although every renewal succeeded in time: %v", c, o.doneAt.Sub(o.start), o.err)
	case loses && !o.lost:
		t.Errorf("%v: still held after %v", c, o.held)
	case keeps:
		// Renewed all along, and the store holds it to the end.
		if !o.storeEnd.After(o.start.Add(o.held)) {
			t.Errorf("%v: the store let it go %v after the start, while the lease was held", c, o.storeEnd.Sub(o.start))
		}
		if n, want := len(o.extends), int(o.held/(c.every+c.rtt))-1; n < want {
			t.Errorf("%v: %d renewals in %v, want at least %d", c, n, o.held, want)
		}
	}
	if !o.lost {
		return
	}
	if !errors.Is(o.err, dlock.ErrLockLost) {
		t.Errorf("%v: Err after Done = %v, want ErrLockLost", c, o.err)
	}
	calls := append(o.acquires[:1:1], o.extends...)
	dls := expectedDeadlines(calls, valid)
	for _, dl := range dls {
		if o.doneAt.Equal(dl) {
			return
		}
	}
	t.Errorf("%v: Done fired %v after the start, want at a local deadline of %v after the start of a successful round trip (%v after the start)",
		c, o.doneAt.Sub(o.start), valid, sinceAll(o.start, dls))
}

// sinceAll returns how long after start each of ts is.
func sinceAll(start time.Time, ts []time.Time) []time.Duration {
	out := make([]time.Duration, len(ts))
	for i, t := range ts {
		out[i] = t.Sub(start)
	}
	return out
}

// renewCases is the sweep: TTL x renewal interval x round trip (and where in
// it the store applies) x drift factor x the store's actual drift, within the
// factor, x what happens to the renewals from the third.
func renewCases() []renewCase {
	var cs []renewCase
	for _, ttl := range []time.Duration{dlock.MinTTL, 30 * time.Millisecond, time.Second, dlock.DefaultTTL} {
		for _, every := range []time.Duration{ttl / 10, ttl / 3, ttl / 2} {
			for _, rtt := range []time.Duration{0, ttl / 50, ttl / 10, ttl * 3 / 10, ttl * 6 / 10} {
				for _, before := range []float64{0, 0.5, 1} {
					for _, factor := range []float64{0, dlock.DefaultDriftFactor, 0.1} {
						drifts := []float64{0, factor}
						if factor == 0 {
							drifts = drifts[:1]
						}
						if margin(ttl, factor) >= ttl/2 {
							continue // refused: no validity left (checkValidity)
						}
						for _, drift := range drifts {
							for _, f := range []sweepFault{faultNone, faultFail, faultLostReply, faultHang} {
								cs = append(cs, renewCase{ttl: ttl, every: every, rtt: rtt, before: before,
									factor: factor, drift: drift, fault: f, from: 3})
							}
						}
					}
				}
			}
		}
	}
	return cs
}

// TestTimeSweepRenewals sweeps the renewer and the local deadline: for every
// case the lease's Deadline is the start of the grant's round trip plus the TTL
// minus the drift margin; a lease whose renewals all come back in time is kept,
// with the store holding it throughout; a lease whose renewals fail, lose their
// reply or hang from the third on is lost exactly at the local deadline of its
// last successful round trip; and every lease that is lost is told no later
// than the moment the store, whose clock runs fast by up to the drift factor
// and counts in whole milliseconds, could let the lock go.
func TestTimeSweepRenewals(t *testing.T) {
	cs := renewCases()
	var slack time.Duration = -1
	var closest renewCase
	for _, c := range cs {
		t.Run(c.String(), func(t *testing.T) {
			o := c.run(t)
			c.check(t, o)
			if o.lost && (slack < 0 || o.expiry.Sub(o.doneAt) < slack) {
				slack, closest = o.expiry.Sub(o.doneAt), c
			}
		})
	}
	t.Logf("%d cases; the closest loss was told %v before the holding expired at the store (%v)", len(cs), slack, closest)
}

// TestTimeSweepFindsDriftBeyondTheMargin: the sweep's check is not vacuous: a
// store whose clock runs faster than the drift factor allows lets the lock go
// before the holder is told.
func TestTimeSweepFindsDriftBeyondTheMargin(t *testing.T) {
	c := renewCase{ttl: time.Second, every: time.Second / 3, rtt: 10 * time.Millisecond,
		factor: dlock.DefaultDriftFactor, drift: 3 * dlock.DefaultDriftFactor, fault: faultFail, from: 1}
	o := c.run(t)
	if o.grantErr != nil || !o.lost {
		t.Fatalf("%v: grant %v, lost %v", c, o.grantErr, o.lost)
	}
	if o.tellFirst() == "" {
		t.Fatalf("%v: Done %v after the start, the store let go %v after it: the check missed a drift of three times the margin",
			c, o.doneAt.Sub(o.start), o.storeEnd.Sub(o.start))
	}
}

// maxHoldCase is one point of the MaxHold sweep.
type maxHoldCase struct {
	lim        driver.TTLLimits
	ttl, every time.Duration
	rtt        time.Duration
	before     float64
	maxHold    time.Duration
}

func (c maxHoldCase) String() string {
	return fmt.Sprintf("step=%v/ttl=%v/every=%v/rtt=%v/before=%.1f/maxhold=%v",
		c.lim.Step, c.ttl, c.every, c.rtt, c.before, c.maxHold)
}

// TestTimeSweepMaxHold sweeps WithMaxHold over TTLs, renewal intervals,
// round trips, the store's TTL step and caps that fall at every distance from a
// renewal: the lease ends at the cap (Done no later than the acquisition's
// start plus the cap, and no earlier than the drift margin, the shortest TTL
// and one step before it), with an error naming the cap, and its holder is told
// no later than the store lets the lock go.
func TestTimeSweepMaxHold(t *testing.T) {
	ms := driver.DefaultTTLLimits
	secs := driver.TTLLimits{Min: time.Second, Max: dlock.MaxTTL, Step: time.Second}
	var cs []maxHoldCase
	for _, lt := range []struct {
		lim driver.TTLLimits
		ttl time.Duration
	}{{ms, 30 * time.Millisecond}, {ms, time.Second}, {secs, 3 * time.Second}} {
		ttl, lim := lt.ttl, lt.lim
		for _, every := range []time.Duration{ttl / 10, ttl / 3} {
			for _, rtt := range []time.Duration{0, ttl / 50, ttl / 10, ttl / 4} {
				if 2*rtt+every >= ttl-margin(ttl, dlock.DefaultDriftFactor) {
					continue // not kept until the cap: see TestTimeSweepRenewals
				}
				for _, before := range []float64{0, 1} {
					// Renewal k starts at k(every+rtt): put the cap at every
					// distance from the second's start.
					s2 := 2 * (every + rtt)
					for _, x := range []time.Duration{lim.Min, lim.Min + lim.Step/2, ttl / 2, ttl - lim.Step/2, ttl, ttl + lim.Step/2, ttl + every/2} {
						cs = append(cs, maxHoldCase{lim: lim, ttl: ttl, every: every, rtt: rtt, before: before, maxHold: s2 + x})
					}
				}
			}
		}
	}
	for _, c := range cs {
		t.Run(c.String(), c.run)
	}
	t.Logf("%d cases", len(cs))
}

func (c maxHoldCase) run(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fakeBootClock(t)
		d := &sweepDriver{lim: c.lim, rtt: c.rtt, before: c.before}
		cl := sweepClient(t, d, dlock.WithTTL(c.ttl), dlock.WithAutoRenew(true),
			dlock.WithRenewEvery(c.every), dlock.WithMaxHold(c.maxHold))
		start := time.Now()
		l := mustTryLock(t, cl, "sweep")
		doneAt, lost := toldFirst(t, d, l, watchDone(l), c.maxHold+2*c.ttl, c.String)
		if !lost {
			t.Fatalf("%v: still held %v after the start", c, time.Since(start))
		}
		bound := start.Add(c.maxHold)
		earliest := bound.Add(-margin(c.ttl, dlock.DefaultDriftFactor) - c.lim.Min - c.lim.Step)
		if doneAt.After(bound) || doneAt.Before(earliest) {
			t.Errorf("%v: Done fired %v after the start, want within [%v, %v]", c,
				doneAt.Sub(start), earliest.Sub(start), c.maxHold)
		}
		// The release that follows the loss frees it within a round trip.
		if end := d.storeEnd(l.Owner()); end.After(bound.Add(c.rtt)) {
			t.Errorf("%v: the store held the lock %v after the start, past the cap and a round trip", c, end.Sub(start))
		}
		if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "MaxHold") {
			t.Errorf("%v: Err = %v, want ErrLockLost naming the MaxHold cap", c, err)
		}
	})
}

// TestTimeSweepShorterExtend: a holder's own Extend to a TTL shorter than the
// time left shortens the holding at the store the moment the request lands;
// the holder is told no later than the store lets the lock go, whenever the
// reply comes back.
func TestTimeSweepShorterExtend(t *testing.T) {
	const ttl = time.Second
	for _, short := range []time.Duration{dlock.MinTTL, 20 * time.Millisecond, 300 * time.Millisecond} {
		for _, rtt := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond} {
			for _, before := range []float64{0, 0.5, 1} {
				for _, f := range []sweepFault{faultNone, faultLostReply, faultHang} {
					name := fmt.Sprintf("short=%v/rtt=%v/before=%.1f/%v", short, rtt, before, f)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							fakeBootClock(t)
							d := &sweepDriver{rtt: rtt, before: before,
								extendFault: func(string, int) sweepFault { return f }}
							l := mustTryLock(t, sweepClient(t, d, dlock.WithTTL(ttl)), "sweep")
							done := watchDone(l)
							time.Sleep(ttl / 4)
							ctx, cancel := context.WithTimeout(context.Background(), 2*ttl)
							defer cancel()
							xerr := l.Extend(ctx, short)
							what := func() string { return fmt.Sprintf("Extend: %v", xerr) }
							if _, lost := toldFirst(t, d, l, done, 2*ttl, what); !lost {
								t.Fatalf("still held after %v (%s)", 2*ttl, what())
							}
						})
					})
				}
			}
		}
	}
}

// TestTimeSweepFailureLimit sweeps the failure limit over limits, round trips
// and retry strategies: a wait that meets only failures ends with ErrUnavailable
// naming the limit, its last attempt starting no later than the limit after the
// first failing one and its reply no earlier; an attempt that finds the lock
// held starts the count again.
func TestTimeSweepFailureLimit(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	for _, limit := range []time.Duration{50 * time.Millisecond, time.Second, dlock.DefaultFailureLimit} {
		for _, rtt := range []time.Duration{0, time.Millisecond, 30 * time.Millisecond, limit / 3} {
			for _, retry := range []dlock.RetryStrategy{dlock.FixedBackoff(10 * time.Millisecond),
				dlock.ExponentialBackoff(8*time.Millisecond, 512*time.Millisecond), dlock.FixedBackoff(2 * limit)} {
				for _, busyFirst := range []bool{false, true} {
					name := fmt.Sprintf("limit=%v/rtt=%v/retry=%v/busy-first=%v", limit, rtt, retry, busyFirst)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							start := time.Now()
							d := &sweepDriver{lim: driver.DefaultTTLLimits, rtt: rtt, rate: 1, prec: time.Millisecond,
								acquireFault: func(time.Time) sweepFault { return faultFail }}
							if busyFirst {
								// Held by another owner for a while: those attempts
								// answer, and the count starts at the first failure.
								d.busyUntil = start.Add(limit / 2)
								d.acquireFault = func(now time.Time) sweepFault {
									if now.Before(d.busyUntil) {
										return faultNone
									}
									return faultFail
								}
							}
							cl := sweepClient(t, d, dlock.WithRetry(retry), dlock.WithFailureLimit(limit), dlock.WithLogger(quiet))
							_, err := cl.Lock(context.Background(), "sweep")
							returned := time.Now()
							if err == nil {
								t.Fatalf("%s: Lock obtained the lock from a failing store", name)
							}
							if !errors.Is(err, dlock.ErrUnavailable) || errors.Is(err, dlock.ErrNotObtained) ||
								!strings.Contains(err.Error(), "failure limit") {
								t.Errorf("%s: error %v, want ErrUnavailable naming the failure limit", name, err)
							}
							var first, last *sweepCall
							acq := d.callsOf("acquire", "")
							for i := range acq {
								if !acq[i].start.Before(d.busyUntil) {
									if first == nil {
										first = &acq[i]
									}
									last = &acq[i]
								}
							}
							if first == nil {
								t.Fatalf("%s: no failing attempt", name)
							}
							if lim := first.start.Add(limit); last.start.After(lim) || last.ret.Before(lim) {
								t.Errorf("%s: last attempt %v-%v after the first failure, want it to span the limit %v", name,
									last.start.Sub(first.start), last.ret.Sub(first.start), limit)
							}
							// What is left after the last reply is the clean-up of
							// the attempts whose outcome is unknown: one release.
							if after := returned.Sub(last.ret); after > rtt {
								t.Errorf("%s: Lock returned %v after the last attempt's reply, want at most one round trip (%v)", name, after, rtt)
							}
						})
					})
				}
			}
		}
	}
}

// TestTimeSweepRenewalAfterLongerExtend: the watchdog renews with the lease's
// own TTL, also after the holder extended it for longer; a renewal that lands
// shortens the holding at the store, so its holder is told no later than the
// store lets the lock go, whether the renewal's reply comes back or not (when
// the first renewal fails, loses its reply or hangs, every later one fails).
func TestTimeSweepRenewalAfterLongerExtend(t *testing.T) {
	const ttl = time.Second
	for _, longer := range []time.Duration{2 * ttl, 4 * ttl} {
		for _, rtt := range []time.Duration{0, 10 * time.Millisecond, 100 * time.Millisecond} {
			for _, before := range []float64{0, 0.5, 1} {
				for _, f := range []sweepFault{faultNone, faultFail, faultLostReply, faultHang} {
					name := fmt.Sprintf("longer=%v/rtt=%v/before=%.1f/%v", longer, rtt, before, f)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							fakeBootClock(t)
							d := &sweepDriver{rtt: rtt, before: before,
								extendFault: func(_ string, n int) sweepFault {
									switch n {
									case 1:
										return faultNone // the holder's own
									case 2:
										return f // the first renewal
									}
									if f == faultNone {
										return f
									}
									return faultFail
								}}
							ctx := context.Background()
							l := mustTryLock(t, sweepClient(t, d, dlock.WithTTL(ttl), dlock.WithAutoRenew(true)), "sweep")
							done := watchDone(l)
							time.Sleep(ttl / 4)
							if err := l.Extend(ctx, longer); err != nil {
								t.Fatalf("Extend: %v", err)
							}
							_, lost := toldFirst(t, d, l, done, 2*longer, func() string { return fmt.Sprint(l.Err()) })
							switch {
							case lost && f == faultNone:
								t.Errorf("lost with every renewal in time: %v", l.Err())
							case !lost && f != faultNone:
								t.Errorf("still held after %v with every renewal failing", 2*longer)
							case !lost:
								if err := l.Unlock(ctx); err != nil {
									t.Errorf("Unlock: %v", err)
								}
							}
						})
					})
				}
			}
		}
	}
}

// extendOnRenewal is an Observer that, told of the first renewal of one of
// its two leases, extends the other to ttl, from inside the renewal round.
type extendOnRenewal struct {
	dlock.NopObserver
	ttl    time.Duration
	mu     sync.Mutex
	leases []*dlock.Lease
	target *dlock.Lease // the lease extended; nil until then
	err    error
}

func (o *extendOnRenewal) Renewal(ctx context.Context, e dlock.RenewalEvent) {
	o.mu.Lock()
	if len(o.leases) < 2 || o.target != nil {
		o.mu.Unlock()
		return
	}
	o.target = o.leases[0]
	if o.target.Key() == e.Key {
		o.target = o.leases[1]
	}
	target := o.target
	o.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // a request timeout
	defer cancel()
	err := target.Extend(ctx, o.ttl)
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
}

func (o *extendOnRenewal) watch(ls ...*dlock.Lease) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.leases = ls
}

// extended returns the key of the lease extended ("" before), and the Extend's
// error.
func (o *extendOnRenewal) extended() (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.target == nil {
		return "", nil
	}
	return o.target.Key(), o.err
}

// TestTimeSweepRoundOutcomeAfterShorterExtend: a renewal round's outcome is
// applied after the holder's own Extend may have started (here from an
// Observer told of another lease's outcome in the same round, as is allowed;
// with ExtendMany that order is certain); when that Extend asked for less time,
// lands at the store and loses its reply or hangs, the round's older outcome
// must not give the lease back the longer deadline.
func TestTimeSweepRoundOutcomeAfterShorterExtend(t *testing.T) {
	const ttl = time.Second
	for _, batch := range []bool{true, false} {
		for _, short := range []time.Duration{dlock.MinTTL, 50 * time.Millisecond, 500 * time.Millisecond} {
			for _, f := range []sweepFault{faultLostReply, faultHang} {
				t.Run(fmt.Sprintf("batch=%v/short=%v/%v", batch, short, f), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						fakeBootClock(t)
						obs := &extendOnRenewal{ttl: short}
						// Both first renewals ride in one round; the Extend the
						// Observer makes is the target's second call, and its
						// reply is lost or never comes; the target's later
						// renewals all fail.
						d := &sweepDriver{rtt: 2 * time.Millisecond, batch: batch,
							extendFault: func(key string, n int) sweepFault {
								target, _ := obs.extended()
								switch {
								case key != target || n == 1:
									return faultNone
								case n == 2:
									return f
								}
								return faultFail
							}}
						cl := sweepClient(t, d, dlock.WithTTL(ttl), dlock.WithAutoRenew(true), dlock.WithObserver(obs))
						a, b := mustTryLock(t, cl, "a"), mustTryLock(t, cl, "b")
						obs.watch(a, b)
						da, db := watchDone(a), watchDone(b)
						time.Sleep(ttl / 2) // the first round and the Observer's Extend
						target, _ := obs.extended()
						l, done, other := a, da, b
						if target == "b" {
							l, done, other = b, db, a
						}
						what := func() string {
							_, err := obs.extended()
							return fmt.Sprintf("the Observer's Extend of %s: %v", target, err)
						}
						if _, lost := toldFirst(t, d, l, done, 4*ttl, what); !lost {
							t.Errorf("%s still held after %v", target, 4*ttl)
						}
						_ = other.Unlock(context.Background())
					})
				})
			}
		}
	}
}

// TestTimeSweepBatchedRenewals: leases of several TTLs renewed by one Client in
// rounds (one ExtendMany each, or one Extend per lease), half of whose renewals
// fail, lose their reply or hang from the third on: the others are kept
// throughout (a hang holds up a whole ExtendMany, so there only the leases
// that ride with it are lost), and every lease that is lost is told exactly at
// the local deadline of its last successful round trip, no later than the
// store lets it go.
func TestTimeSweepBatchedRenewals(t *testing.T) {
	ttls := []time.Duration{30 * time.Millisecond, 100 * time.Millisecond, time.Second}
	for _, batch := range []bool{false, true} {
		for _, rtt := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond} {
			for _, before := range []float64{0, 0.5, 1} {
				for _, f := range []sweepFault{faultFail, faultLostReply, faultHang} {
					name := fmt.Sprintf("batch=%v/rtt=%v/before=%.1f/%v", batch, rtt, before, f)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							fakeBootClock(t)
							d := &sweepDriver{rtt: rtt, before: before, batch: batch,
								extendFault: func(key string, n int) sweepFault {
									if strings.HasPrefix(key, "faulty") && n >= 3 {
										return f
									}
									return faultNone
								}}
							cl := sweepClient(t, d, dlock.WithAutoRenew(true))
							type held struct {
								l    *dlock.Lease
								ttl  time.Duration
								done <-chan time.Time
							}
							var ls []held
							for _, ttl := range ttls {
								for _, kind := range []string{"kept", "faulty"} {
									l := mustTryLock(t, cl, fmt.Sprintf("%s-%v", kind, ttl), dlock.WithTTL(ttl))
									ls = append(ls, held{l, ttl, watchDone(l)})
								}
							}
							const hold = 3 * time.Second
							time.Sleep(hold)
							for _, h := range ls {
								key := h.l.Key()
								select {
								case doneAt := <-h.done:
									if !strings.HasPrefix(key, "faulty") && !(batch && f == faultHang) {
										t.Errorf("%s lost with every renewal in time: %v", key, h.l.Err())
										continue
									}
									if end := d.storeEnd(h.l.Owner()); doneAt.After(end) {
										t.Errorf("%s told late: Done fired %v after the store let the lock go", key, doneAt.Sub(end))
									}
									valid := h.ttl - margin(h.ttl, dlock.DefaultDriftFactor)
									calls := append(d.callsOf("acquire", key), d.callsOf("extend", key)...)
									if !slices.ContainsFunc(expectedDeadlines(calls, valid), doneAt.Equal) {
										t.Errorf("%s: Done fired at %v, not at a local deadline", key, doneAt)
									}
								default:
									if strings.HasPrefix(key, "faulty") {
										t.Errorf("%s still held after %v with its renewals failing", key, hold)
									} else if err := h.l.Unlock(context.Background()); err != nil {
										t.Errorf("%s: Unlock: %v", key, err)
									}
								}
							}
						})
					})
				}
			}
		}
	}
}
