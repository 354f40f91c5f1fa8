// Package testproxy is an in-process TCP proxy for fault-injection tests: it sits
// between a client and a server on loopback and can delay or black-hole each
// direction, reset every connection, or refuse connections altogether.
package testproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Direction selects one half of every proxied connection.
type Direction int

const (
	// Upstream is the client-to-server direction (requests).
	Upstream Direction = iota
	// Downstream is the server-to-client direction (replies).
	Downstream
)

// Proxy forwards connections from Addr to a target address. Its faults apply to
// the connections open at the time and to later ones. Safe for concurrent use.
type Proxy struct {
	Addr string // listening address on 127.0.0.1

	target string
	ln     net.Listener
	wg     sync.WaitGroup
	done   chan struct{}

	mu        sync.Mutex
	latency   [2]time.Duration
	blackhole [2]bool
	down      bool
	stall     bool
	accepted  int
	conns     map[net.Conn]struct{}
}

// Start starts a proxy to target on a free loopback port and closes it when the
// test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// SetLatency delays every chunk of data in direction dir by d (0 for none).
func (p *Proxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	p.latency[dir] = d
	p.mu.Unlock()
}

// Blackhole silently drops all data in direction dir while on; dropped data is
// never delivered.
func (p *Proxy) Blackhole(dir Direction, on bool) {
	p.mu.Lock()
	p.blackhole[dir] = on
	p.mu.Unlock()
}

// Reset closes every open connection with a TCP reset, on both sides.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// SetDown makes the proxy reset every open connection and every new one at once
// (as a host that refuses connections), or work normally again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.Reset()
	}
}

// Stall makes the proxy accept new connections and never forward them (a server
// that accepts and does not answer) while on; open connections keep working.
// Connections stalled stay so until the proxy resets or closes them.
func (p *Proxy) Stall(on bool) {
	p.mu.Lock()
	p.stall = on
	p.mu.Unlock()
}

// Accepted returns the number of connections the proxy has accepted.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops the proxy, closes every connection and waits for its goroutines.
func (p *Proxy) Close() {
	select {
	case <-p.done:
		return
	default:
	}
	close(p.done)
	_ = p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepted++
		down, stall := p.down, p.stall
		if stall {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if stall {
			continue
		}
		if down {
			_ = c.(*net.TCPConn).SetLinger(0)
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go p.pipe(c, s, Upstream)
		go p.pipe(s, c, Downstream)
	}
}

// track registers both ends of a connection, unless the proxy is closing.
func (p *Proxy) track(c, s net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		_ = c.Close()
		_ = s.Close()
		return false
	default:
	}
	p.conns[c], p.conns[s] = struct{}{}, struct{}{}
	return true
}

type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies src to dst in direction dir, applying the faults in force when each
// chunk is read (latency) and when it is due (blackhole).
func (p *Proxy) pipe(src, dst net.Conn, dir Direction) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.mu.Lock()
				d := p.latency[dir]
				p.mu.Unlock()
				q <- chunk{buf[:n], time.Now().Add(d)}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		_ = src.Close()
		_ = dst.Close()
		for range q { // let the reader finish
		}
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for c := range q {
		if d := time.Until(c.due); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-p.done:
				return
			}
		}
		p.mu.Lock()
		drop := p.blackhole[dir]
		p.mu.Unlock()
		if drop {
			continue
		}
		if _, err := dst.Write(c.data); err != nil {
			return
		}
	}
}
