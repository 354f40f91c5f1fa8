package verify

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/redis/go-redis/v9"
)

// TestFaultProxyDelaysAndResets checks the client-side faults of a run
// against a store already running: a delay holds back each way of a round
// trip, a reset cuts the connections (the next ones work).
func TestFaultProxyDelaysAndResets(t *testing.T) {
	srv := testserver.StartRedis(t)
	p, err := NewFaultProxy(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 1, ReadTimeout: 5 * time.Second})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	const d = 200 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d {
		t.Errorf("a round trip with a delay of %v each way took %v", d, took)
	}
	p.SetDelay(0)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("PING through the proxy: %q, %v", buf[:n], err)
	}
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(buf); err == nil {
		t.Error("a connection the proxy cut still reads")
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Errorf("after a reset, a new connection: %v", err)
	}
}

// TestPropertiesOfEmptyHistory checks that a run that recorded nothing (its
// workers never started) is reported, not a crash.
func TestPropertiesOfEmptyHistory(t *testing.T) {
	ps, st := Properties(nil, "plain", time.Second, "")
	if len(ps) == 0 || st.Grants != 0 {
		t.Fatalf("%v %+v", ps, st)
	}
	for _, p := range ps {
		if p.Violation != nil {
			t.Errorf("%s: %v", p.Name, p.Violation.Msg)
		}
	}
}
