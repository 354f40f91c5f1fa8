package verify

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// noSubCheckLock is the lock of the nosubcheck variant: the plain lock itself,
// over a client whose connections drop the server's confirmations of the
// subscriptions to redislock's loss channel and to the keyspace
// notifications. The Client checks its holdings when such a confirmation
// arrives (a message sent before it was not heard): without them, a
// force-unlock published while its subscription was down is left to the
// holder's next renewal. The messages themselves still arrive.
func noSubCheckLock(s Spec) (dlock.Locker, func(), error) {
	rdb, err := oneRedis(s)
	if err != nil {
		return nil, func() {}, err
	}
	rdb.AddHook(quietSubscriptions{})
	lk, err := redislock.New(rdb)
	return lk, func() { rdb.Close() }, err
}

// quietSubscriptions is the redis.Hook of the nosubcheck variant: every
// connection it dials drops the confirmations (see quietConn).
type quietSubscriptions struct{}

// DialHook implements redis.Hook: the connection drops the confirmations.
func (quietSubscriptions) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &quietConn{Conn: c}, nil
	}
}

// ProcessHook implements redis.Hook.
func (quietSubscriptions) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook.
func (quietSubscriptions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// quietConn is a connection that hands its reader every reply but the
// confirmations of a subscription to redislock's loss channel or to a
// keyspace pattern (the RESP2 arrays subscribe or psubscribe, the channel, the
// count).
type quietConn struct {
	net.Conn
	in, out []byte // read and not yet parsed; parsed and not yet handed over
	err     error  // the error of the connection, once in and out are spent
}

// Read hands over the replies read, the confirmations left out.
func (c *quietConn) Read(p []byte) (int, error) {
	buf := make([]byte, 4096)
	for len(c.out) == 0 && c.err == nil {
		n, err := c.Conn.Read(buf)
		c.in = append(c.in, buf[:n]...)
		for {
			size, items, ok := respValue(c.in)
			if !ok {
				break
			}
			if !confirmation(items) {
				c.out = append(c.out, c.in[:size]...)
			}
			c.in = c.in[size:]
		}
		if err != nil {
			c.err = err
			c.out = append(c.out, c.in...) // what cannot be parsed goes as it is
			c.in = nil
		}
	}
	if len(c.out) == 0 {
		err := c.err
		c.err = nil // a timeout is not the connection's end
		return 0, err
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// confirmation reports whether items (a reply's array of strings) confirm a
// subscription to redislock's loss channel or to a keyspace pattern.
func confirmation(items []string) bool {
	if len(items) != 3 || items[0] != "subscribe" && items[0] != "psubscribe" {
		return false
	}
	return items[1] == redislock.Prefix+"lost" || strings.HasPrefix(items[1], "__keyspace@")
}

// respValue parses the RESP value at the start of b: its size, the strings of
// an array of bulk strings and integers (nil for another value), and whether b
// holds the whole of it.
func respValue(b []byte) (int, []string, bool) {
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	if !ok || len(line) == 0 {
		return 0, nil, false
	}
	head := len(line) + 2
	switch line[0] {
	case '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < 0 {
			return head, nil, err == nil
		}
		if len(rest) < n+2 {
			return 0, nil, false
		}
		return head + n + 2, []string{string(rest[:n])}, true
	case '*', '>', '~', '%':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < 0 {
			return head, nil, err == nil
		}
		if line[0] == '%' {
			n *= 2
		}
		size, items := head, []string{}
		for range n {
			s, sub, ok := respValue(b[size:])
			if !ok {
				return 0, nil, false
			}
			size += s
			if len(sub) == 1 {
				items = append(items, sub[0])
			} else {
				items = nil
			}
			if items == nil {
				items = []string{} // not an array of strings: nothing to match
			}
		}
		return size, items, true
	case ':':
		return head, []string{string(line[1:])}, true
	}
	return head, nil, true // a simple string, an error, another line
}

// TestQuietConnDropsTheLossConfirmations: the nosubcheck variant's
// connection leaves out the confirmations of the loss channel's and the
// keyspace pattern's subscriptions, and hands over every other reply whole,
// however the bytes arrive.
func TestQuietConnDropsTheLossConfirmations(t *testing.T) {
	stream := "+OK\r\n" +
		"*3\r\n$9\r\nsubscribe\r\n$" + strconv.Itoa(len(redislock.Prefix+"lost")) + "\r\n" + redislock.Prefix + "lost\r\n:1\r\n" +
		"*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:2\r\n" +
		"*3\r\n$10\r\npsubscribe\r\n$21\r\n__keyspace@0__:dlock*\r\n:3\r\n" +
		"*3\r\n$7\r\nmessage\r\n$10\r\ndlock:lost\r\n$1\r\nk\r\n" +
		"$-1\r\n:7\r\n-ERR x\r\n"
	want := "+OK\r\n*3\r\n$9\r\nsubscribe\r\n$5\r\nother\r\n:2\r\n" +
		"*3\r\n$7\r\nmessage\r\n$10\r\ndlock:lost\r\n$1\r\nk\r\n$-1\r\n:7\r\n-ERR x\r\n"
	for _, chunk := range []int{1, 3, 7, len(stream)} {
		server, client := net.Pipe()
		go func() {
			for i := 0; i < len(stream); i += chunk {
				_, _ = server.Write([]byte(stream[i:min(i+chunk, len(stream))]))
			}
			server.Close()
		}()
		got, err := io.ReadAll(&quietConn{Conn: client})
		client.Close()
		if err != nil || string(got) != want {
			t.Errorf("chunks of %d: read %q (%v), want %q", chunk, got, err, want)
		}
	}
}
