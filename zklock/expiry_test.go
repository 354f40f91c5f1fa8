package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/go-zookeeper/zk"
)

// TestSessionExpiryEndsLeaseAtOnce: the session of a holder with a fixed 15s
// lease is ended on the server (another connection takes it over and closes it,
// as an operator's tool would). The holder's Lease is lost as soon as its
// client hears of the expiry, seconds before its local deadline, with the
// expiry as the cause.
func TestSessionExpiryEndsLeaseAtOnce(t *testing.T) {
	d := newDriverAt(t, srv.Addr, WithSessionTimeout(20*time.Second))
	c, err := NewClient(d, dlock.WithTTL(15*time.Second), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctxT(t, 10*time.Second), dlocktest.Key(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Unlock(context.Background()) }()
	closeSession(t, srv.Addr, d.conn)
	ended := time.Now()
	select {
	case <-l.Done():
	case <-time.After(time.Until(l.Deadline()) + 5*time.Second):
		t.Fatal("the lease outlived its deadline")
	}
	took := time.Since(ended)
	t.Logf("lease lost %v after the session was closed on the server (%v before its deadline): %v",
		took.Round(time.Millisecond), time.Until(l.Deadline()).Round(time.Millisecond), l.Err())
	if took > 5*time.Second {
		t.Errorf("lease lost %v after the session ended, want within the client's reconnect", took.Round(time.Millisecond))
	}
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) || !strings.Contains(err.Error(), "session expired") {
		t.Errorf("lease error %v, want ErrLockLost naming the session's expiry", err)
	}
}

// closeSession ends conn's session on the server at addr: a connection of its
// own re-attaches the session (with its password) and closes it. conn is moved
// off the session first, and told at its reconnect that the session expired.
func closeSession(t *testing.T, addr string, conn *zk.Conn) {
	t.Helper()
	// The client keeps the session's password unexported; the test reads it.
	passwd := reflect.ValueOf(conn).Elem().FieldByName("passwd").Bytes()
	nc, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	be := binary.BigEndian
	// ConnectRequest: protocol version, last zxid seen, timeout, session id, password.
	req := be.AppendUint32(nil, 0)
	req = be.AppendUint64(req, 0)
	req = be.AppendUint32(req, 20000)
	req = be.AppendUint64(req, uint64(conn.SessionID()))
	req = be.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	resp := roundTrip(t, nc, req)
	// ConnectResponse: protocol version, timeout, session id (0: refused), password.
	if len(resp) < 16 || be.Uint64(resp[8:16]) != uint64(conn.SessionID()) {
		t.Fatalf("the server did not hand over session %#x: %x", conn.SessionID(), resp)
	}
	// closeSession: xid 1, op -11; the reply header is xid, zxid, error code.
	closeReq := be.AppendUint32(nil, 1)
	closeReq = be.AppendUint32(closeReq, uint32(0xFFFFFFF5))
	if resp := roundTrip(t, nc, closeReq); len(resp) < 16 || be.Uint32(resp[12:16]) != 0 {
		t.Fatalf("closeSession: %x", resp)
	}
}

// roundTrip sends one length-prefixed packet and reads the reply.
func roundTrip(t *testing.T, nc net.Conn, body []byte) []byte {
	t.Helper()
	if _, err := nc.Write(binary.BigEndian.AppendUint32(nil, uint32(len(body)))); err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Write(body); err != nil {
		t.Fatal(err)
	}
	var n [4]byte
	if _, err := io.ReadFull(nc, n[:]); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(nc, resp); err != nil {
		t.Fatal(err)
	}
	return resp
}
