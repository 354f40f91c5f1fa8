package zklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
)

// waitQueue waits, with watches on the lock node, until cond holds for the queue
// at lp (empty while the lock node is missing), and returns that queue.
func waitQueue(t *testing.T, d *Driver, lp string, within time.Duration, cond func([]child) bool) []child {
	t.Helper()
	timeout := time.After(within)
	for {
		names, _, ch, err := d.conn.ChildrenW(lp)
		if isNoNode(err) {
			var ok bool
			ok, _, ch, err = d.conn.ExistsW(lp)
			if ok {
				continue
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		q, _, err := queue(lp, names)
		if err != nil {
			t.Fatal(err)
		}
		if cond(q) {
			return q
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("queue of %s still %v after %v", lp, q, within)
		}
	}
}

func owners(q []child) []string {
	var o []string
	for _, c := range q {
		o = append(o, c.owner)
	}
	return o
}

func hasOwner(owner string) func([]child) bool {
	return func(q []child) bool { return find(q, owner) >= 0 }
}

func notOwner(owner string) func([]child) bool {
	return func(q []child) bool { return find(q, owner) < 0 }
}

func TestTokenIsCzxidAndSurvivesLockNodeRemoval(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	lp := d.lockPath(key)
	var last uint64
	for i := 0; i < 3; i++ {
		g, err := d.acquire(ctx, key, "o"+strconv.Itoa(i), time.Second, "", false)
		if err != nil {
			t.Fatal(err)
		}
		// The lock node is removed (as the server removes an empty container)
		// after each release: the sequence starts again, the token does not.
		if !strings.HasSuffix(g.node, "-0000000000") {
			t.Errorf("node %s: sequence did not start again", g.node)
		}
		if g.token <= last {
			t.Fatalf("token %d not above %d", g.token, last)
		}
		_, st, err := d.conn.Get(lp + "/" + g.node)
		if err != nil || uint64(st.Czxid) != g.token {
			t.Fatalf("token %d, node czxid %v (%v)", g.token, st, err)
		}
		last = g.token
		if err := d.Release(ctx, driver.Holding{Key: key, Owner: "o" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
		if err := d.conn.Delete(lp, -1); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTryLockDoesNotQueue(t *testing.T) {
	a, b := newDriver(t), newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	if _, err := a.acquire(ctx, key, "holder", 5*time.Second, "", false); err != nil {
		t.Fatal(err)
	}
	_, err := b.acquire(ctx, key, "try", time.Second, "", false)
	var busy *driver.Taken
	if !errors.As(err, &busy) || busy.Remaining <= 4*time.Second || busy.Remaining > 5*time.Second {
		t.Fatalf("TryLock of a held lock: %v", err)
	}
	q, err := b.list(ctx, b.lockPath(key))
	if err != nil || len(q) != 1 || q[0].owner != "holder" {
		t.Fatalf("queue after TryLock: %v, %v", owners(q), err)
	}
	if busy.Queued || busy.Handle != nil {
		t.Errorf("TryLock's busy error says it queued: %+v", busy)
	}
	// A waiting attempt queues, and a second attempt of the same owner finds
	// its node instead of making another.
	for i := 0; i < 2; i++ {
		if _, err := b.acquire(ctx, key, "waiter", time.Second, "", true); !errors.As(err, &busy) {
			t.Fatalf("waiting attempt %d: %v", i, err)
		}
		if !busy.Queued || busy.Handle == nil || busy.RetryAfter <= 0 || busy.RetryAfter > time.Second/3 {
			t.Errorf("waiting attempt's busy error: %+v", busy)
		}
	}
	q, _ = b.list(ctx, b.lockPath(key))
	if got := strings.Join(owners(q), ","); got != "holder,waiter" {
		t.Fatalf("queue %s, want holder,waiter", got)
	}
	if err := b.Abandon(ctx, driver.Holding{Key: key, Owner: "waiter"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, driver.Holding{Key: key, Owner: "holder"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, driver.Holding{Key: key, Owner: "holder"}); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Release: %v", err)
	}
	// A TryLock that finds the lock free makes its node, but another owner's
	// node comes first: it deletes its own and reports busy.
	b.testHookCreate = func() {
		b.testHookCreate = nil
		if _, err := a.acquire(ctx, key, "first", 5*time.Second, "", false); err != nil {
			t.Error(err)
		}
	}
	if _, err := b.acquire(ctx, key, "second", time.Second, "", false); !errors.As(err, &busy) || busy.Queued {
		t.Fatalf("TryLock that lost the race to create: %v", err)
	}
	q, _ = b.list(ctx, b.lockPath(key))
	if got := strings.Join(owners(q), ","); got != "first" {
		t.Fatalf("queue %s, want first", got)
	}
}

func TestSessionTimeoutBoundsTTL(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	for _, tc := range []struct{ ask, want time.Duration }{
		{time.Second, time.Second},
		{time.Millisecond, 400 * time.Millisecond}, // the server's minimum: 2 ticks
		{time.Hour, 30 * time.Second},              // its maximum
	} {
		d := newDriver(t, WithSessionTimeout(tc.ask))
		if got := d.SessionTimeout(); got != tc.want {
			t.Errorf("session timeout %v granted as %v, want %v", tc.ask, got, tc.want)
		}
		if lim := d.TTLLimits(); lim.Min != dlock.MinTTL || lim.Max != tc.want || lim.Step != time.Millisecond {
			t.Errorf("TTLLimits %+v", lim)
		}
		_, err := d.acquire(ctx, dlocktest.Key(t), "o", tc.want+time.Millisecond, "", false)
		if !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("ttl above the session timeout %v: %v", tc.want, err)
		}
	}
}

// watches returns the server's watches: path -> watching session ids.
func watches(t *testing.T) map[string][]string {
	t.Helper()
	out, err := srv.FourLetter("wchp")
	if err != nil {
		t.Fatal(err)
	}
	w := map[string][]string{}
	path := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "/"):
			path = strings.TrimSpace(line)
		case strings.TrimSpace(line) != "" && path != "":
			w[path] = append(w[path], strings.TrimSpace(line))
		}
	}
	return w
}

func sid(d *Driver) string { return fmt.Sprintf("0x%x", d.SessionID()) }

func TestWaiterWatchesOnlyItsPredecessor(t *testing.T) {
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	holder := newDriver(t)
	if _, err := holder.acquire(ctx, key, "a", 10*time.Second, "", false); err != nil {
		t.Fatal(err)
	}
	names := []string{"b", "c", "d"}
	ds := map[string]*Driver{"a": holder}
	wakes := map[string]<-chan struct{}{}
	for _, n := range names {
		d := newDriver(t)
		ds[n] = d
		if _, err := d.acquire(ctx, key, n, 10*time.Second, "", true); !errors.Is(err, dlock.ErrNotObtained) {
			t.Fatalf("waiter %s: %v", n, err)
		}
		w, cancel, err := d.Subscribe(ctx, driver.Holding{Key: key, Owner: n})
		if err != nil {
			t.Fatal(err)
		}
		defer cancel()
		wakes[n] = w
	}
	lp := holder.lockPath(key)
	q, err := holder.list(ctx, lp)
	if err != nil {
		t.Fatal(err)
	}
	// Each waiter watches its predecessor only: the holder with a data watch
	// (its renewals bring its TTL along), a waiter with a child watch, which
	// its rewrites do not fire (the server's wchp lists data watches only).
	// Nobody watches the lock node itself (no herd on a children watch).
	gone := map[string]bool{} // sessions of waiters that gave up: their last watch may linger until it fires once
	check := func(q []child, headWatched bool) {
		t.Helper()
		succ := map[string]string{}
		for i := 0; i+1 < len(q); i++ {
			succ[lp+"/"+q[i].name] = sid(ds[q[i+1].owner])
		}
		for try := 0; ; try++ { // the watches are set asynchronously
			w := watches(t)
			ok := len(w[lp]) == 0
			for p, ss := range w {
				if !strings.HasPrefix(p, lp+"/") {
					continue
				}
				for _, s := range ss {
					ok = ok && (s == succ[p] || gone[s])
				}
			}
			if headWatched && len(q) > 1 {
				ok = ok && slices.Contains(w[lp+"/"+q[0].name], succ[lp+"/"+q[0].name])
			}
			if ok {
				return
			}
			if try == 100 {
				t.Fatalf("watches %v, want those of %v", w, succ)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check(q, true)
	if err := holder.Release(ctx, driver.Holding{Key: key, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wakes["b"]:
	case <-time.After(10 * time.Second):
		t.Fatal("b not woken by its predecessor's release")
	}
	if _, err := ds["b"].acquire(ctx, key, "b", 10*time.Second, "", true); err != nil {
		t.Fatalf("b after its wake: %v", err)
	}
	q, _ = holder.list(ctx, lp)
	check(q, false)
	for _, n := range []string{"c", "d"} {
		select {
		case <-wakes[n]:
			t.Errorf("%s woken by a release that was not its predecessor's", n)
		default:
		}
	}
	// A waiter that gives up in the middle wakes its successor only, whose
	// next attempt watches the new predecessor.
	if err := ds["c"].Abandon(ctx, driver.Holding{Key: key, Owner: "c"}); err != nil {
		t.Fatal(err)
	}
	gone[sid(ds["c"])] = true
	select {
	case <-wakes["d"]:
	case <-time.After(10 * time.Second):
		t.Fatal("d not woken by its predecessor giving up")
	}
	if _, err := ds["d"].acquire(ctx, key, "d", 10*time.Second, "", true); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("d after its wake: %v", err)
	}
	q, _ = holder.list(ctx, lp)
	if got := strings.Join(owners(q), ","); got != "b,d" {
		t.Fatalf("queue %s, want b,d", got)
	}
	check(q, true)
}

func TestLostCreateReplyLeavesNoOrphan(t *testing.T) {
	proxy := testproxy.Start(t, srv.Addr)
	d := newDriverAt(t, proxy.Addr, WithSessionTimeout(4*time.Second))
	obs := newDriver(t)
	key := dlocktest.Key(t)
	lp := d.lockPath(key)
	session := d.SessionID()
	if err := obs.makePath(ctxT(t, 5*time.Second), lp); err != nil {
		t.Fatal(err)
	}
	// The create reaches the server; its reply, and every reply after it, is
	// dropped.
	d.testHookCreate = func() { proxy.Blackhole(testproxy.Downstream, true) }
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := d.acquire(ctx, key, "lost", time.Second, "", false)
	cancel()
	d.testHookCreate = nil
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire with its reply lost: %v", err)
	}
	waitQueue(t, obs, lp, 5*time.Second, hasOwner("lost"))
	// The Client's abandon cannot get through either.
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	err = d.Abandon(ctx, driver.Holding{Key: key, Owner: "lost"})
	cancel()
	if err == nil {
		t.Fatal("abandon through a black hole succeeded")
	}
	// The connection comes back in the same session: the node goes at once,
	// not when the session expires.
	start := time.Now()
	proxy.Blackhole(testproxy.Downstream, false)
	proxy.Reset()
	waitQueue(t, obs, lp, 10*time.Second, notOwner("lost"))
	if d.SessionID() != session {
		t.Fatalf("session changed from %#x to %#x: the node went with the session, not by the clean-up", session, d.SessionID())
	}
	t.Logf("orphan deleted %v after the reconnect (session timeout %v)", time.Since(start), d.SessionTimeout())
	if _, err := obs.acquire(ctxT(t, 5*time.Second), key, "next", time.Second, "", false); err != nil {
		t.Fatal(err)
	}
}

func TestDeadWaiterLeavesNoNode(t *testing.T) {
	holder, obs := newDriver(t), newDriver(t)
	ctx := ctxT(t, 20*time.Second)
	key := dlocktest.Key(t)
	lp := holder.lockPath(key)
	if _, err := holder.acquire(ctx, key, "holder", 10*time.Second, "", false); err != nil {
		t.Fatal(err)
	}
	// A waiter whose process is killed: its node goes when its session expires.
	h := startHelper(t, "waiter", key)
	h.expect(t, "queued", 20*time.Second)
	waitQueue(t, obs, lp, time.Second, hasOwner("waiter"))
	killed := time.Now()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitQueue(t, obs, lp, 10*time.Second, notOwner("waiter"))
	t.Logf("killed waiter's node gone after %v (session timeout %v)", time.Since(killed), helperSession)
	// A waiter whose Driver is closed: its node goes at once.
	w := newDriver(t)
	if _, err := w.acquire(ctx, key, "closed", time.Second, "", true); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	_ = w.Close()
	q := waitQueue(t, obs, lp, time.Second, notOwner("closed"))
	if got := strings.Join(owners(q), ","); got != "holder" {
		t.Fatalf("queue %s, want holder", got)
	}
}

func TestPausedHolderLosesLock(t *testing.T) {
	key := dlocktest.Key(t)
	h := startHelper(t, "holder", key)
	token, _ := strconv.ParseUint(h.expect(t, "held", 20*time.Second)[0], 10, 64)
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	c, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctxT(t, 20*time.Second), key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	t.Logf("lock taken %v after the holder was stopped (session timeout %v)", taken.Sub(stopped), helperSession)
	if l.Token() <= token {
		t.Errorf("token %d not above the paused holder's %d", l.Token(), token)
	}
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	f := h.expect(t, "lost", 10*time.Second)
	deadline, _ := strconv.ParseInt(f[0], 10, 64)
	if deadline > taken.UnixNano() {
		t.Errorf("paused holder's deadline %v after the next acquisition", time.Duration(deadline-taken.UnixNano()))
	}
	if f[2] != "true" {
		t.Errorf("paused holder's lease ended without ErrLockLost")
	}
	if err := l.Unlock(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
}

func TestInspectListForceUnlock(t *testing.T) {
	a, b := newDriver(t), newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	prefix := dlocktest.Key(t)
	keys := []string{prefix + ":x/1", prefix + ":y", prefix + ":z%.."}
	var tokens []uint64
	for _, k := range keys {
		g, err := a.acquire(ctx, k, "holder", 10*time.Second, "meta "+k, false)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, g.token)
	}
	if _, err := b.acquire(ctx, keys[1], "waiter", time.Second, "", true); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	info, err := b.Inspect(ctx, keys[1])
	if err != nil || info.Key != keys[1] || info.Owner != "holder" || info.Metadata != "meta "+keys[1] ||
		info.Token != tokens[1] || info.Waiters != 1 || info.TTL <= 9*time.Second || info.TTL > 10*time.Second {
		t.Fatalf("Inspect: %+v, %v", info, err)
	}
	if free, err := b.Inspect(ctx, prefix+":free"); err != nil || free.Held {
		t.Fatalf("Inspect of a free lock: %+v, %v", free, err)
	}
	all, err := driver.List(ctx, b, prefix+":*")
	if err != nil || len(all) != 3 || all[0].Key != keys[0] || all[2].Key != keys[2] {
		t.Fatalf("List: %+v, %v", all, err)
	}
	if some, err := driver.List(ctx, b, prefix+":[xz]*"); err != nil || len(some) != 2 {
		t.Fatalf("List of a set: %+v, %v", some, err)
	}
	if _, err := driver.List(ctx, b, ""); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("List with an empty pattern: %v", err)
	}
	if forced, err := b.ForceUnlock(ctx, keys[1]); err != nil || forced.Owner != "holder" || forced.Token != tokens[1] {
		t.Fatalf("ForceUnlock: %+v, %v", forced, err)
	}
	if _, err := a.Extend(ctx, driver.Holding{Key: keys[1], Owner: "holder"}, time.Second); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Extend after ForceUnlock: %v", err)
	}
	if g, err := b.acquire(ctx, keys[1], "waiter", time.Second, "", true); err != nil || g.token <= tokens[1] {
		t.Fatalf("waiter after ForceUnlock: %v, %v", g, err)
	}
	if _, err := b.ForceUnlock(ctx, prefix+":free"); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("ForceUnlock of a free lock: %v", err)
	}
}

func TestEscape(t *testing.T) {
	for _, k := range []string{"a", "a/b", "/", "%", "%2F", ".", "..", "...", "a.b", "ü", "a b", "zookeeper", "x:y*z"} {
		e := escape(k)
		if strings.Contains(e, "/") || e == "." || e == ".." {
			t.Errorf("escape(%q) = %q", k, e)
		}
		if got, ok := unescape(e); !ok || got != k {
			t.Errorf("unescape(escape(%q)) = %q, %v", k, got, ok)
		}
	}
	for _, bad := range []string{"%", "%2", "%zz", "%2f", "a%41"} {
		if _, ok := unescape(bad); ok {
			t.Errorf("unescape(%q) accepted", bad)
		}
	}
}

func TestBadInput(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	//lint:ignore SA1012 a nil context is the bad input under test
	if _, err := NewDriver(nil, []string{srv.Addr}); !errors.Is(err, dlock.ErrInvalid) { //nolint:staticcheck
		t.Errorf("NewDriver(nil ctx): %v", err)
	}
	if _, err := NewClient(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("NewClient(nil driver): %v", err)
	}
	for name, tc := range map[string]struct {
		servers []string
		opts    []Option
	}{
		"no servers":      {nil, nil},
		"bad server":      {[]string{"no-port"}, nil},
		"relative root":   {[]string{srv.Addr}, []Option{WithRoot("dlock")}},
		"trailing slash":  {[]string{srv.Addr}, []Option{WithRoot("/dlock/")}},
		"dot root":        {[]string{srv.Addr}, []Option{WithRoot("/a/../b")}},
		"session 0":       {[]string{srv.Addr}, []Option{WithSessionTimeout(0)}},
		"session too big": {[]string{srv.Addr}, []Option{WithSessionTimeout(1000 * time.Hour)}},
		"empty ACL":       {[]string{srv.Addr}, []Option{WithACL()}},
		"nil option":      {[]string{srv.Addr}, []Option{nil}},
	} {
		if d, err := NewDriver(ctx, tc.servers, tc.opts...); !errors.Is(err, dlock.ErrInvalid) {
			if d != nil {
				_ = d.Close()
			}
			t.Errorf("NewDriver with %s: %v", name, err)
		}
	}
	d := newDriver(t)
	for _, owner := range []string{"", "a/b", "a%b", "ü"} {
		if _, err := d.acquire(ctx, "k", owner, time.Second, "", false); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("owner %q: %v", owner, err)
		}
	}
	if _, err := d.acquire(ctx, "a{b", "o", time.Second, "", false); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("bad key: %v", err)
	}
	var nilDriver *Driver
	if _, err := nilDriver.acquire(ctx, "k", "o", time.Second, "", false); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("nil driver: %v", err)
	}
	_ = d.Close()
	if _, err := d.acquire(ctx, "k", "o", time.Second, "", false); !errors.Is(err, dlock.ErrUnavailable) {
		t.Errorf("closed driver: %v", err)
	}
}

func TestForceUnlockTellsHolderAtOnce(t *testing.T) {
	c, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		start := time.Now()
		_, err := c.ForceUnlock(ctx, l.Key())
		return start, err
	})
	t.Logf("ForceUnlock to Done: %v", took)
}

func TestDeletionByAnotherClientTellsHolderAtOnce(t *testing.T) {
	c, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	other := newDriver(t)
	took := dlocktest.PushedLoss(t, c, dlocktest.Key(t), 2*time.Second, func(ctx context.Context, l *dlock.Lease) (time.Time, error) {
		lp := other.lockPath(l.Key())
		q, err := other.list(ctx, lp)
		if err != nil || len(q) != 1 {
			return time.Time{}, fmt.Errorf("queue %v: %v", q, err)
		}
		start := time.Now()
		return start, other.conn.Delete(lp+"/"+q[0].name, -1)
	})
	t.Logf("a raw delete to Done: %v", took)
}
