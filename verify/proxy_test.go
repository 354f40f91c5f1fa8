package verify

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// proxied starts a redis-server and a Proxy in front of it; the proxy is
// closed, and its goroutines checked gone, at the end of the test.
func proxied(t *testing.T) (*testserver.Redis, *Proxy) {
	t.Helper()
	srv := testserver.StartRedis(t)
	opt := goleak.IgnoreCurrent()
	p, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		goleak.VerifyNone(t, opt)
	})
	return srv, p
}

// dialPing dials addr and sends a PING on the connection, closed at the end
// of the test.
func dialPing(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ping(t, c)
	return c
}

func ping(t *testing.T, c net.Conn) {
	t.Helper()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
}

// pong reads a PONG from c within d; it returns the read's error.
func pong(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "+PONG\r\n" {
		return errors.New("read " + string(buf[:n]))
	}
	return nil
}

// TestProxyDelaysEachWay checks a delay of requests, of replies, and of both:
// a round trip takes at least the delays of its two ways, and a healed delay
// releases what it held at once.
func TestProxyDelaysEachWay(t *testing.T) {
	_, p := proxied(t)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1, ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const d = 150 * time.Millisecond
	for _, c := range []struct {
		name     string
		up, down time.Duration
	}{{"requests", d, 0}, {"replies", 0, d}, {"both", d, d}} {
		p.SetDelay(c.up, c.down)
		start := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if took < c.up+c.down {
			t.Errorf("%s delayed by %v and %v: a round trip took %v", c.name, c.up, c.down, took)
		}
		if took > c.up+c.down+2*time.Second {
			t.Errorf("%s delayed by %v and %v: a round trip took %v", c.name, c.up, c.down, took)
		}
	}
	// A long delay, healed while a reply is held: it comes at once.
	p.SetDelay(0, time.Hour)
	c := dialPing(t, p.Addr())
	if err := pong(c, 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a reply delayed by an hour: %v", err)
	}
	p.Heal()
	if err := pong(c, 5*time.Second); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// TestProxyBlackhole checks the black hole: an open connection and a new one
// get nothing, not even the close of the server's side, and stop taking data
// once the proxy's bounded buffers and the kernel's are full; after the heal,
// what was held flows on.
func TestProxyBlackhole(t *testing.T) {
	srv, p := proxied(t)
	open := dialPing(t, p.Addr())
	if err := pong(open, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetBlackhole(true)
	ping(t, open)
	fresh := dialPing(t, p.Addr())
	for _, c := range []net.Conn{open, fresh} {
		if err := pong(c, 300*time.Millisecond); !isTimeout(err) {
			t.Fatalf("through a black hole: %v", err)
		}
	}
	if n := p.Held(); n < 2 {
		t.Fatalf("the black hole held %d chunks, want the two pings at least", n)
	}
	// Bounded: a writer that goes on writing into the hole blocks.
	flood, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer flood.Close()
	_ = flood.SetWriteDeadline(time.Now().Add(time.Second))
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	written := 0
	for written < 256<<20 {
		n, err := flood.Write(chunk)
		written += n
		if err != nil {
			break
		}
	}
	if written >= 256<<20 {
		t.Errorf("a black hole took %d MiB without blocking the writer", written>>20)
	}
	p.Heal()
	for _, c := range []net.Conn{open, fresh} {
		if err := pong(c, 5*time.Second); err != nil {
			t.Fatalf("after the heal: %v", err)
		}
	}
	flood.Close()

	// The server closes the connection during a black hole: the client
	// sees the close only after the heal.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	p.SetBlackhole(true)
	if err := rdb.Do(context.Background(), "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pong(open, 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("a close through a black hole: %v", err)
	}
	p.Heal()
	if err := pong(open, 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("the server's close after the heal: %v", err)
	}
}

// TestProxyResetAndSetTarget checks that a reset cuts the open connections
// (new ones work) and that SetTarget points new connections elsewhere.
func TestProxyResetAndSetTarget(t *testing.T) {
	_, p := proxied(t)
	c := dialPing(t, p.Addr())
	if err := pong(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	if err := pong(c, 5*time.Second); err == nil || isTimeout(err) {
		t.Errorf("a connection the proxy cut still reads: %v", err)
	}
	if err := pong(dialPing(t, p.Addr()), 5*time.Second); err != nil {
		t.Errorf("after a reset, a new connection: %v", err)
	}
	other := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: other.Addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "here", "other", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetTarget(other.Addr)
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer prdb.Close()
	if v, err := prdb.Get(ctx, "here").Result(); err != nil || v != "other" {
		t.Errorf("after SetTarget: %q, %v", v, err)
	}
}

// TestProxyPartitionsEtcdMember checks the etcd members' peer proxies: with
// the leader's black-holed, the others elect another leader among
// themselves, and after the heal the cut member follows it.
func TestProxyPartitionsEtcdMember(t *testing.T) {
	peers := make([]*Proxy, 3)
	c := testserver.StartEtcdClusterWith(t, 3, testserver.EtcdClusterOptions{
		PeerAddr: func(i int, listen string) (string, error) {
			px, err := NewProxy(listen)
			if err != nil {
				return "", err
			}
			t.Cleanup(px.Close)
			peers[i] = px
			return px.Addr(), nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cut := slices.Index(c.Members, old)
	st, err := old.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	peers[cut].SetBlackhole(true)
	testserver.Eventually(t, 20*time.Second, "the members the partition left elect another leader", func() bool {
		var leaders []uint64
		for i, m := range c.Members {
			if i == cut {
				continue
			}
			s, err := m.Status(ctx)
			if err != nil || s.Leader == 0 || s.Leader == st.MemberID {
				return false
			}
			leaders = append(leaders, s.Leader)
		}
		return leaders[0] == leaders[1]
	})
	peers[cut].Heal()
	if _, err := c.Leader(ctx); err != nil {
		t.Errorf("after the heal: %v", err)
	}
}

// TestProxyExpiresZooKeeperSession checks FaultExpire's means: a black hole
// longer than the session timeout between a client and ZooKeeper makes the
// server expire the session, which the client learns after the heal.
func TestProxyExpiresZooKeeperSession(t *testing.T) {
	srv := testserver.StartZooKeeper(t)
	p, err := NewProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	conn, events, err := zk.Connect([]string{p.Addr()}, time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	await := func(want zk.State) {
		t.Helper()
		timeout := time.After(15 * time.Second)
		for {
			select {
			case e := <-events:
				if e.State == want {
					return
				}
			case <-timeout:
				t.Fatalf("no %v within 15 s", want)
			}
		}
	}
	await(zk.StateHasSession)
	p.SetBlackhole(true)
	time.Sleep(2500 * time.Millisecond) // the fault: 2.5 session timeouts of silence
	p.Heal()
	await(zk.StateExpired)
}

// quiet is a ZooKeeper client's logger that says nothing.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// readUntil reads c until what it read holds want, within d.
func readUntil(c net.Conn, want string, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var got []byte
	buf := make([]byte, 256)
	for !bytes.Contains(got, []byte(want)) {
		n, err := c.Read(buf)
		if err != nil {
			return err
		}
		got = append(got, buf[:n]...)
	}
	return nil
}

// TestProxyOneWay checks the one-way partitions: with requests cut, what
// the server sends still comes (a subscriber gets what is published) and a
// request waits for the heal; with replies cut, a request reaches the server
// (its write is there) while its reply, and what is published, wait for the
// heal.
func TestProxyOneWay(t *testing.T) {
	srv, p := proxied(t)
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer direct.Close()
	ctx := context.Background()
	sub, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Write([]byte("SUBSCRIBE ch\r\n")); err != nil {
		t.Fatal(err)
	}
	if err := readUntil(sub, "subscribe", 5*time.Second); err != nil {
		t.Fatalf("subscribing: %v", err)
	}

	p.SetOneWay(true, false)
	if err := direct.Publish(ctx, "ch", "sent-while-requests-cut").Err(); err != nil {
		t.Fatal(err)
	}
	if err := readUntil(sub, "sent-while-requests-cut", 5*time.Second); err != nil {
		t.Errorf("requests cut: what the server sent did not come: %v", err)
	}
	c := dialPing(t, p.Addr())
	if err := pong(c, 200*time.Millisecond); !isTimeout(err) {
		t.Errorf("requests cut: a PING was answered (%v)", err)
	}
	p.Heal()
	if err := pong(c, 5*time.Second); err != nil {
		t.Fatalf("requests cut, healed: %v", err)
	}

	p.SetOneWay(false, true)
	if _, err := c.Write([]byte("SET oneway written\r\n")); err != nil {
		t.Fatal(err)
	}
	testserver.Eventually(t, 5*time.Second, "replies cut: the request reaches the server", func() bool {
		return direct.Get(ctx, "oneway").Val() == "written"
	})
	if err := readUntil(c, "+OK", 200*time.Millisecond); !isTimeout(err) {
		t.Errorf("replies cut: the reply came (%v)", err)
	}
	if err := direct.Publish(ctx, "ch", "sent-while-replies-cut").Err(); err != nil {
		t.Fatal(err)
	}
	if err := readUntil(sub, "sent-while-replies-cut", 200*time.Millisecond); !isTimeout(err) {
		t.Errorf("replies cut: what the server sent came (%v)", err)
	}
	p.Heal()
	if err := readUntil(c, "+OK", 5*time.Second); err != nil {
		t.Errorf("replies cut, healed: the reply: %v", err)
	}
	if err := readUntil(sub, "sent-while-replies-cut", 5*time.Second); err != nil {
		t.Errorf("replies cut, healed: what was published: %v", err)
	}
}
