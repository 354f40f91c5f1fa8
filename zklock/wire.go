package zklock

import (
	"bytes"
	"net"
	"sync"
	"time"
)

// wire watches the requests the client writes to the server, so that a
// request can be sent right behind another one without waiting for the first
// one's reply (see createAndList): the client writes each request in one
// piece, in the order they were made, on the session's one connection.
type wire struct {
	mu    sync.Mutex
	marks map[string]chan struct{} // closed once a request containing the key has been written
}

// dialer wraps dial so that the connections it makes report their writes.
func (w *wire) dialer(dial func(network, address string, timeout time.Duration) (net.Conn, error)) func(string, string, time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := dial(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &wireConn{Conn: c, w: w}, nil
	}
}

// expect returns a channel closed once a request containing mark has been
// written, and a func that forgets mark; mark must be unique among those
// expected at a time.
func (w *wire) expect(mark string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	w.mu.Lock()
	if w.marks == nil {
		w.marks = map[string]chan struct{}{}
	}
	w.marks[mark] = ch
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		if w.marks[mark] == ch {
			delete(w.marks, mark)
		}
		w.mu.Unlock()
	}
}

// wrote closes the channels of the marks in b, a request just written.
func (w *wire) wrote(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for m, ch := range w.marks {
		if bytes.Contains(b, []byte(m)) {
			close(ch)
			delete(w.marks, m)
		}
	}
}

// wireConn is a connection to the server that reports its writes to w.
type wireConn struct {
	net.Conn
	w *wire
}

func (c *wireConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if err == nil {
		c.w.wrote(b)
	}
	return n, err
}
