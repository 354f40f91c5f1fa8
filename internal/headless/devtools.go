package headless

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Browser is a headless chromium driven over the DevTools protocol, for tests
// that interact with a page (click, answer a dialog).
type Browser struct {
	t      testing.TB
	conn   net.Conn
	r      *bufio.Reader
	mu     sync.Mutex
	nextID int
	events []json.RawMessage // every message received that was not a reply
}

// Start starts chromium on about:blank with a DevTools endpoint on a free
// loopback port, attaches to its page, and stops it when the test ends.
func Start(t testing.TB) *Browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, Chromium(t), args(t, "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1", "about:blank")...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	// Asked to stop, chromium ends its helper processes too.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	endpoint := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`DevTools listening on (ws://\S+)`)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				endpoint <- m[1]
			}
		}
		close(endpoint)
	}()
	var ws string
	select {
	case ws = <-endpoint:
	case <-time.After(30 * time.Second):
	}
	if ws == "" {
		t.Fatal("headless: chromium announced no DevTools endpoint")
	}
	u, err := url.Parse(ws)
	if err != nil {
		t.Fatal(err)
	}
	page := pageTarget(t, u.Host)
	b := &Browser{t: t}
	b.dial(u.Host, page)
	t.Cleanup(func() { b.conn.Close() })
	b.Call("Page.enable", nil)
	b.Call("Runtime.enable", nil)
	return b
}

// pageTarget returns the WebSocket path of the first page target.
func pageTarget(t testing.TB, host string) string {
	t.Helper()
	resp, err := http.Get("http://" + host + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var targets []struct {
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&targets); err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if tg.Type == "page" {
			u, err := url.Parse(tg.WS)
			if err != nil {
				t.Fatal(err)
			}
			return u.Path
		}
	}
	t.Fatalf("headless: no page target in %+v", targets)
	return ""
}

// dial opens the WebSocket (RFC 6455) to path on host.
func (b *Browser) dial(host, path string) {
	conn, err := net.DialTimeout("tcp", host, 10*time.Second)
	if err != nil {
		b.t.Fatal(err)
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	k := base64.StdEncoding.EncodeToString(key[:])
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", path, host, k)
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	sum := sha1.Sum([]byte(k + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		b.t.Fatalf("headless: WebSocket handshake: %s", resp.Status)
	}
	b.conn, b.r = conn, r
}

// send writes one masked text frame.
func (b *Browser) send(msg []byte) error {
	var hdr bytes.Buffer
	hdr.WriteByte(0x81) // FIN, text
	switch n := len(msg); {
	case n < 126:
		hdr.WriteByte(0x80 | byte(n))
	case n < 1<<16:
		hdr.WriteByte(0x80 | 126)
		_ = binary.Write(&hdr, binary.BigEndian, uint16(n))
	default:
		hdr.WriteByte(0x80 | 127)
		_ = binary.Write(&hdr, binary.BigEndian, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr.Write(mask[:])
	body := make([]byte, len(msg))
	for i := range msg {
		body[i] = msg[i] ^ mask[i%4]
	}
	_, err := b.conn.Write(append(hdr.Bytes(), body...))
	return err
}

// recv reads one message (joining continuation frames; control frames are
// skipped).
func (b *Browser) recv() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(b.r, h[:]); err != nil {
			return nil, err
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var l uint16
			if err := binary.Read(b.r, binary.BigEndian, &l); err != nil {
				return nil, err
			}
			n = uint64(l)
		case 127:
			if err := binary.Read(b.r, binary.BigEndian, &n); err != nil {
				return nil, err
			}
		}
		if n > 64<<20 {
			return nil, errors.New("headless: DevTools message over 64 MiB")
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(b.r, p); err != nil {
			return nil, err
		}
		if h[0]&0x08 != 0 { // a control frame (close, ping, pong)
			if h[0]&0x0f == 0x8 {
				return nil, io.EOF
			}
			continue
		}
		msg = append(msg, p...)
		if h[0]&0x80 != 0 {
			return msg, nil
		}
	}
}

// Call sends a DevTools command and returns its result; events that arrive
// meanwhile are kept for WaitEvent. A protocol error fails the test.
func (b *Browser) Call(method string, params any) json.RawMessage {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nextID++
	id := b.nextID
	msg, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	_ = b.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := b.send(msg); err != nil {
		b.t.Fatalf("headless: %s: %v", method, err)
	}
	for {
		raw, err := b.recv()
		if err != nil {
			b.t.Fatalf("headless: %s: %v", method, err)
		}
		var reply struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &reply) != nil || reply.ID != id {
			b.events = append(b.events, raw)
			continue
		}
		if reply.Error != nil {
			b.t.Fatalf("headless: %s: %s", method, reply.Error.Message)
		}
		return reply.Result
	}
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise) and
// returns its value as JSON.
func (b *Browser) Eval(expr string) json.RawMessage {
	b.t.Helper()
	res := b.Call("Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.Exception != nil {
		b.t.Fatalf("headless: evaluating %s: %v %+v", expr, err, r.Exception)
	}
	return r.Result.Value
}

// WaitEval evaluates expr until it is true, failing the test after 15s.
func (b *Browser) WaitEval(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for string(b.Eval(expr)) != "true" {
		if time.Now().After(deadline) {
			b.t.Fatalf("headless: timed out waiting for %s (%s)", what, expr)
		}
		time.Sleep(50 * time.Millisecond) // the page updates on its own timer
	}
}

// WaitEvent returns the params of the next event named method, reading
// messages (failing the test after 15s).
func (b *Browser) WaitEvent(method string) json.RawMessage {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	_ = b.conn.SetDeadline(time.Now().Add(15 * time.Second))
	for {
		var raw json.RawMessage
		if len(b.events) > 0 {
			raw, b.events = b.events[0], b.events[1:]
		} else {
			m, err := b.recv()
			if err != nil {
				b.t.Fatalf("headless: waiting for %s: %v", method, err)
			}
			raw = m
		}
		var ev struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if json.Unmarshal(raw, &ev) == nil && ev.Method == method {
			return ev.Params
		}
	}
}

// Navigate loads url and waits for its load event.
func (b *Browser) Navigate(url string) {
	b.t.Helper()
	b.Call("Page.navigate", map[string]any{"url": url})
	b.WaitEvent("Page.loadEventFired")
}
