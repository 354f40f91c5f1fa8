package testproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	_ = c.SetDeadline(start.Add(timeout))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echo %q", line)
	}
	return time.Since(start), err
}

func TestFaults(t *testing.T) {
	p := testproxy.Start(t, echo(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(t, c, r, time.Second); err != nil {
		t.Fatalf("plain: %v", err)
	}

	p.SetLatency(Upstream, 100*time.Millisecond)
	p.SetLatency(Downstream, 50*time.Millisecond)
	if d, err := roundTrip(t, c, r, time.Second); err != nil || d < 150*time.Millisecond {
		t.Fatalf("latency: %v %v, want >= 150ms", d, err)
	}
	p.SetLatency(Upstream, 0)
	p.SetLatency(Downstream, 0)

	p.Blackhole(Downstream, true) // the request arrives, the reply is dropped
	if _, err := roundTrip(t, c, r, 100*time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("blackhole: %v, want a timeout", err)
	}
	p.Blackhole(Downstream, false)

	p.Reset()
	if _, err := roundTrip(t, c, r, time.Second); err == nil {
		t.Fatal("reset: connection still works")
	}

	p.SetDown(true)
	c2, err := net.Dial("tcp", p.Addr)
	if err == nil {
		defer c2.Close()
		if _, err := roundTrip(t, c2, bufio.NewReader(c2), time.Second); err == nil {
			t.Fatal("down: a new connection works")
		}
	}
	p.SetDown(false)
	c3, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	if _, err := roundTrip(t, c3, bufio.NewReader(c3), time.Second); err != nil {
		t.Fatalf("up again: %v", err)
	}
}

const (
	Upstream   = testproxy.Upstream
	Downstream = testproxy.Downstream
)
