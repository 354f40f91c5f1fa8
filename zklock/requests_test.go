package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/go-zookeeper/zk"
)

// opNames are the ZooKeeper opcodes the lock path may send.
var opNames = map[int32]string{1: "create", 2: "delete", 3: "exists", 4: "getData", 5: "setData",
	8: "getChildren", 12: "getChildren2", 14: "multi", 19: "createContainer"}

// opLog records the requests a Driver's connections send, by opcode, pings
// left out: the client writes each request in one piece, its header (length,
// xid, opcode) first.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) dialer(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, address, timeout)
	if err != nil {
		return nil, err
	}
	return &loggedConn{Conn: c, l: l}, nil
}

// take returns the requests recorded since the last take.
func (l *opLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}

type loggedConn struct {
	net.Conn
	l     *opLog
	first bool // the connect request, which has no header, has been written
}

func (c *loggedConn) Write(b []byte) (int, error) {
	if !c.first {
		c.first = true
	} else if len(b) >= 12 {
		xid, op := int32(binary.BigEndian.Uint32(b[4:])), int32(binary.BigEndian.Uint32(b[8:]))
		if xid >= 0 { // not a ping, auth or set-watches packet
			name := opNames[op]
			if name == "" {
				name = "op" + string(rune('0'+op))
			}
			c.l.mu.Lock()
			c.l.ops = append(c.l.ops, name)
			c.l.mu.Unlock()
		}
	}
	return c.Conn.Write(b)
}

// TestRequestsPerOperation counts, exactly, the requests of the lock path: an
// uncontended Lock+Unlock is a create (in a multi that also returns its
// token), a read of the queue and a delete; a waiter queues with a create, a
// read of the queue and a watch on its predecessor; a hand-over is the
// holder's delete and the next waiter's read of the queue, after which it
// holds the lock with no write.
func TestRequestsPerOperation(t *testing.T) {
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	logs := map[string]*opLog{}
	clients := map[string]*dlock.Client{}
	for _, n := range []string{"a", "b", "c"} {
		logs[n] = &opLog{}
		c, err := NewClient(newDriver(t, WithDialer(logs[n].dialer)))
		if err != nil {
			t.Fatal(err)
		}
		clients[n] = c
	}
	expect := func(who, what string, want ...string) {
		t.Helper()
		if got := logs[who].take(); !slices.Equal(got, want) {
			t.Errorf("%s: requests %s, want %s", what, strings.Join(got, " "), strings.Join(want, " "))
		}
	}
	// The first cycle makes the lock node, the root and the clock node.
	l, err := clients["a"].Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	logs["a"].take()
	for i := 0; i < 5; i++ {
		l, err := clients["a"].Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		expect("a", "uncontended Lock+Unlock", "multi", "getChildren2", "delete")
	}
	l, err = clients["a"].TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	expect("a", "uncontended TryLock", "getChildren2", "multi", "getChildren2")

	// b queues behind the holder a, c behind b.
	type result struct {
		l   *dlock.Lease
		err error
	}
	got := map[string]chan result{}
	obs := newDriver(t) // watches the queue; its requests are not counted
	lp := obs.lockPath(key)
	for i, n := range []string{"b", "c"} {
		got[n] = make(chan result, 1)
		go func() {
			l, err := clients[n].Lock(ctx, key)
			got[n] <- result{l, err}
		}()
		waitQueue(t, obs, lp, 10*time.Second, func(q []child) bool { return len(q) == i+2 })
	}
	// Each waiter's first attempt has set its watch before its Taken returned;
	// the Client subscribes after that, with no request of its own.
	waitOps := func(who string, n int) []string {
		t.Helper()
		var ops []string
		for end := time.Now().Add(10 * time.Second); len(ops) < n && time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			ops = append(ops, logs[who].take()...)
		}
		return ops
	}
	if ops := waitOps("b", 3); !slices.Equal(ops, []string{"multi", "getChildren2", "getData"}) {
		t.Errorf("b queueing behind the holder: %s, want multi getChildren2 getData (with a watch)", strings.Join(ops, " "))
	}
	if ops := waitOps("c", 3); !slices.Equal(ops, []string{"multi", "getChildren2", "getChildren2"}) {
		t.Errorf("c queueing behind a waiter: %s, want multi getChildren2 getChildren2 (with a watch)", strings.Join(ops, " "))
	}
	// a hands over to b, b to c.
	holder, tokens := "a", []uint64{l.Token()}
	for _, next := range []string{"b", "c"} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r := <-got[next]
		if r.err != nil {
			t.Fatal(r.err)
		}
		if holder == "a" {
			// Waiters queued while a held the lock: its session set an
			// exists watch on its node, once (see loss.go).
			expect(holder, "release", "exists", "delete")
		} else {
			expect(holder, "release", "delete")
		}
		expect(next, "taking the lock handed over", "getChildren2")
		if r.l.Token() <= tokens[len(tokens)-1] {
			t.Errorf("token %d after %v", r.l.Token(), tokens)
		}
		holder, l, tokens = next, r.l, append(tokens, r.l.Token())
	}
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect("c", "release", "delete")
}

// TestWaitedNodeMargin: a Lock's node carries its TTL plus waiterMargin, so
// that it can be taken without a write after waiting; the lease still reports,
// and trusts, its TTL at most, and the first renewal writes the TTL alone.
func TestWaitedNodeMargin(t *testing.T) {
	const ttl = 3 * time.Second
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	d := newDriver(t)
	c, err := NewClient(d, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	info, err := d.Inspect(ctx, key)
	if err != nil || info.TTL <= ttl || info.TTL > ttl+waiterMargin(ttl) {
		t.Errorf("Inspect of a lock taken by Lock: TTL %v (%v), want in (%v, %v]", info.TTL, err, ttl, ttl+waiterMargin(ttl))
	}
	if left, err := l.TTL(ctx); err != nil || left > ttl || left < ttl-time.Second {
		t.Errorf("Lease.TTL %v (%v), want at most %v", left, err, ttl)
	}
	if time.Until(l.Deadline()) > ttl {
		t.Errorf("deadline %v away, beyond the TTL", time.Until(l.Deadline()))
	}
	if err := l.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	if info, err := d.Inspect(ctx, key); err != nil || info.TTL > ttl {
		t.Errorf("Inspect after Extend: TTL %v (%v), want at most %v", info.TTL, err, ttl)
	}
}

// TestStaleWaiterNodeIsRewrittenAtTake: a waiter whose node's last write no
// longer outlives the lease by its data (the waiter did not rewrite it in
// time) writes it again as it takes the lock.
func TestStaleWaiterNodeIsRewrittenAtTake(t *testing.T) {
	const ttl = 3 * time.Second
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	log := &opLog{}
	a, b := newDriver(t), newDriver(t, WithDialer(log.dialer))
	if _, err := a.acquire(ctx, key, "a", 10*time.Second, "", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acquire(ctx, key, "b", ttl, "", true); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("waiter: %v", err)
	}
	w := b.waiterOf(ownerKey{b.lockPath(key), "b"})
	if w == nil {
		t.Fatal("no waiter record")
	}
	w.written = w.written.Add(-waiterMargin(ttl) - time.Millisecond)
	if err := a.Release(ctx, driver.Holding{Key: key, Owner: "a"}); err != nil {
		t.Fatal(err)
	}
	log.take()
	g, err := b.acquire(ctx, key, "b", ttl, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if ops := log.take(); !slices.Equal(ops, []string{"getChildren2", "setData"}) {
		t.Errorf("take of a stale node: %s, want getChildren2 setData", strings.Join(ops, " "))
	}
	if info, err := b.Inspect(ctx, key); err != nil || info.Token != g.token || info.TTL > ttl || info.TTL < ttl-time.Second {
		t.Errorf("after the take: %+v, %v; want token %d, TTL about %v", info, err, g.token, ttl)
	}
}

// TestClockNotWritable: where the session may not write the clock node (made
// by another Driver with an ACL of its own), a create goes alone and the
// token is read from the node: the lock works, with one request more.
func TestClockNotWritable(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	root := "/" + escape(dlocktest.Key(t))
	log := &opLog{}
	d := newDriver(t, WithRoot(root), WithDialer(log.dialer))
	if err := d.makePath(ctx, root); err != nil {
		t.Fatal(err)
	}
	owner := newDriver(t, WithRoot(root), WithAuth("digest", []byte("u:p")), WithACL(zk.DigestACL(zk.PermAll, "u", "p")...))
	if err := owner.makeClock(ctx); err != nil {
		t.Fatal(err)
	}
	key := "k"
	for i := 0; i < 2; i++ {
		g, err := d.acquire(ctx, key, "o", time.Second, "", true)
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := d.conn.Get(d.lockPath(key) + "/" + g.node)
		if err != nil || uint64(st.Czxid) != g.token || g.session != d.SessionID() {
			t.Fatalf("grant %+v, node %+v, %v", g, st, err)
		}
		if err := d.Release(ctx, driver.Holding{Key: key, Owner: "o", Handle: &handle{node: g.node}}); err != nil {
			t.Fatal(err)
		}
	}
	if !d.plainCreate.Load() {
		t.Error("the Driver still writes the clock node")
	}
	log.take()
	g, err := d.acquire(ctx, key, "o", time.Second, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if ops := log.take(); !slices.Equal(ops, []string{"create", "getChildren2", "getData"}) {
		t.Errorf("requests %s, want create getChildren2 getData", strings.Join(ops, " "))
	}
	_ = d.Release(ctx, driver.Holding{Key: key, Owner: "o", Handle: &handle{node: g.node}})
}

// maxAllocsPerCycle bounds the client's heap allocations per uncontended Lock
// and Unlock (three requests through go-zookeeper, the Lease): about 120 when
// it was set.
const maxAllocsPerCycle = 140

// TestAllocationsPerUncontendedCycle fails when the client's allocations per
// uncontended lock and unlock grow past maxAllocsPerCycle.
func TestAllocationsPerUncontendedCycle(t *testing.T) {
	c, err := NewClient(newDriver(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 30*time.Second)
	key := dlocktest.Key(t)
	dlocktest.AllocsPerCycle(t, ctx, c, key, 100, maxAllocsPerCycle)
}
