package verify

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards TCP connections to a target and injects the network faults
// between the workers and a store: it cuts every connection (Reset), points
// new ones at another server (SetTarget: a Sentinel-aware client following
// the new primary), delays what flows each way (SetDelay) and black-holes
// everything (SetBlackhole) or one direction of it (SetOneWay). One Proxy stands for the network path to one
// server address: its faults hit the traffic of the connections dialled to
// that address, in both directions, and nothing else.
//
// What it holds back is bounded: each direction of a connection queues at most
// proxyQueue chunks of proxyChunk bytes, and then stops reading, so that the
// sender's TCP window fills as it would behind a slow or silent link.
type Proxy struct {
	ln net.Listener
	wg sync.WaitGroup

	mu               sync.Mutex
	target           string
	links            map[*link]struct{}
	up, down         time.Duration // delays of requests (to the server) and replies (to the client)
	holeUp, holeDown bool          // requests, replies held by a black hole
	changed          chan struct{} // closed (and replaced) when a delay or the black hole changes
	closed           bool
	serverCloses     int // connections the server closed (see ServerCloses)
	held             int // chunks a black hole held (see Held)
}

const (
	proxyChunk = 16 << 10
	proxyQueue = 32
)

// NewProxy listens on a free loopback port and forwards to target (host:port).
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, links: map[*link]struct{}{}, changed: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget points new connections at target and cuts the existing ones.
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	p.Reset()
}

// Reset cuts every open connection (new ones are accepted as before) and
// returns how many it cut.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.cut()
	}
	return len(links)
}

// ServerCloses returns how many connections the server has closed (or that
// broke on its side) since the proxy started: those that ended on the
// server's side while the proxy had not cut them.
func (p *Proxy) ServerCloses() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.serverCloses
}

// Held returns how many chunks of data (or closes) a black hole has held
// since the proxy started, in either direction.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// SetDelay holds back every chunk of data for up on its way to the server
// and for down on its way back to the client (0: none). A chunk is forwarded
// at its arrival plus the delay of the moment, so that a healed delay
// releases what it held at once.
func (p *Proxy) SetDelay(up, down time.Duration) {
	p.mu.Lock()
	p.up, p.down = up, down
	p.notify()
	p.mu.Unlock()
}

// SetBlackhole stops (on) or resumes (off) every byte in both directions.
// Connections stay open and new ones are accepted, but nothing reaches either
// side, not even a close, until the black hole heals; then what was held
// flows on, as after a partition of the network.
func (p *Proxy) SetBlackhole(on bool) {
	p.SetOneWay(on, on)
}

// SetOneWay black-holes what flows to the server (requests) and what flows
// back to the client (replies) each on its own: a one-way partition when one
// is on and the other off, where what the open direction carries flows on (a
// request's reply, when only replies are cut, is held; a reply to a request
// sent before, when only requests are cut, still comes). A side's close is
// held with its bytes.
func (p *Proxy) SetOneWay(requests, replies bool) {
	p.mu.Lock()
	p.holeUp, p.holeDown = requests, replies
	p.notify()
	p.mu.Unlock()
}

// Heal ends the delays and the black hole.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.up, p.down, p.holeUp, p.holeDown = 0, 0, false, false
	p.notify()
	p.mu.Unlock()
}

// notify wakes every forwarder to look at the faults again (p.mu held).
func (p *Proxy) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Close stops listening, cuts every connection and waits for every
// goroutine of the proxy.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.ln.Close()
	p.Reset()
	p.wg.Wait()
}

// hold returns how long a chunk that arrived at t going toUpstream must still
// wait (negative: none), whether a black hole holds its direction, and the
// channel closed at the next change.
func (p *Proxy) hold(t time.Time, toUpstream bool) (time.Duration, bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d, holed := p.down, p.holeDown
	if toUpstream {
		d, holed = p.up, p.holeUp
	}
	return time.Until(t.Add(d)), holed, p.changed
}

// accept forwards each connection to the target of the moment.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		s, err := net.DialTimeout("tcp", target, 3*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(4)
		p.mu.Unlock()
		up, down := make(chan chunk, proxyQueue), make(chan chunk, proxyQueue)
		go p.read(l, c, up, false)
		go p.forward(l, s, up, true)
		go p.read(l, s, down, true)
		go p.forward(l, c, down, false)
	}
}

// link is one forwarded connection: the client's and the server's side.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed when the link is cut
}

// cut closes both sides and stops the link's goroutines.
func (l *link) cut() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.server.Close()
	})
}

// chunk is data read from one side, with the moment it arrived.
type chunk struct {
	b []byte
	t time.Time
}

// read reads src (the server's side: server) into q until src ends or the
// link is cut; then it closes q. It stops reading while q is full. The
// server's end of a link the proxy did not cut counts in ServerCloses.
func (p *Proxy) read(l *link, src net.Conn, q chan<- chunk, server bool) {
	defer p.wg.Done()
	defer close(q)
	b := make([]byte, proxyChunk)
	for {
		n, err := src.Read(b)
		if n > 0 {
			select {
			case q <- chunk{append([]byte(nil), b[:n]...), time.Now()}:
			case <-l.done:
				return
			}
		}
		if err != nil {
			select {
			case <-l.done: // cut here: a cut closes done before the connections
			default:
				if server {
					p.mu.Lock()
					p.serverCloses++
					p.mu.Unlock()
				}
			}
			return
		}
	}
}

// forward writes what q brings to dst, each chunk once its delay has passed
// and no black hole holds it; when q ends (its source closed), it cuts the
// link, no earlier than a black hole lets the close through.
func (p *Proxy) forward(l *link, dst net.Conn, q <-chan chunk, toUpstream bool) {
	defer p.wg.Done()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
		l.cut()
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
		case <-l.done:
			return
		}
		at := c.t
		if !ok {
			at = time.Now() // the close: held by a black hole only
		}
		if !p.await(l, at, toUpstream, !ok) {
			return
		}
		if !ok {
			return
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
	}
}

// await waits until a chunk that arrived at t may be forwarded (a close,
// noDelay, only waits for the black hole); false when the link was cut
// meanwhile.
func (p *Proxy) await(l *link, t time.Time, toUpstream, noDelay bool) bool {
	for counted := false; ; {
		wait, holed, changed := p.hold(t, toUpstream)
		if holed && !counted {
			counted = true
			p.mu.Lock()
			p.held++
			p.mu.Unlock()
		}
		if noDelay {
			wait = 0
		}
		if !holed && wait <= 0 {
			return true
		}
		var tm *time.Timer
		var timer <-chan time.Time
		if !holed {
			tm = time.NewTimer(wait)
			timer = tm.C
		}
		select {
		case <-l.done:
			stop(tm)
			return false
		case <-changed:
		case <-timer:
		}
		stop(tm)
	}
}

// stop stops t, if any.
func stop(t *time.Timer) {
	if t != nil {
		t.Stop()
	}
}
