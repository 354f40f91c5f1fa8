package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// onPG names PostgreSQL as the server a variant locks on.
const onPG = "pg"

// pgWrites counts the messages every measured PostgreSQL connection has sent:
// pgx writes each query (with its Parse/Bind/Execute/Sync) in one write. The
// bench's PostgreSQL has no other client, so this is what the server received.
var pgWrites atomic.Int64

// openPG opens a pglock Client on a connection pool of its own, whose writes
// count as lock requests (client and server side alike).
func openPG(o opening) (locker, error) {
	if o.e == nil || o.e.cons.pg == nil {
		return nil, fmt.Errorf("bench: no PostgreSQL server in this run")
	}
	cfg, err := pgxpool.ParseConfig(o.e.cons.pg.URL)
	if err != nil {
		return nil, err
	}
	cnt := o.cnt
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cnt.dials.Add(1)
		return pgConn{conn, cnt}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	d, err := pglock.NewDriver(pool, pglock.Config{CreateTable: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	c, err := d.Client()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return dlockLocker{c: c, close: func() error { pool.Close(); return nil }}, nil
}

// pgConn counts each write as a request.
type pgConn struct {
	net.Conn
	c *cmdCounter
}

func (c pgConn) Write(b []byte) (int, error) {
	c.c.lock.Add(1)
	pgWrites.Add(1)
	return c.Conn.Write(b)
}

// pgCPU returns the CPU time (user and system) of the PostgreSQL server whose
// postmaster is pid: its own, its exited children's, and that of the children
// still running (one backend per connection, and the background workers).
func pgCPU(pid int) (time.Duration, error) {
	total, err := pidCPU(pid)
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, ent := range ents {
		child, err := strconv.Atoi(ent.Name())
		if err != nil || child == pid {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue // gone meanwhile
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if i < 0 || len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if t, err := pidCPU(child); err == nil {
			total += t
		}
	}
	return total + exitedChildrenCPU(pid), nil
}

// exitedChildrenCPU returns the CPU time of pid's children that have exited
// and been waited for (cutime and cstime in /proc/PID/stat), or 0.
func exitedChildrenCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 15 {
		return 0
	}
	var ticks int64
	for _, s := range f[13:15] {
		n, _ := strconv.ParseInt(s, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// pgVersion returns the server's version, or "?".
func pgVersion(ctx context.Context, url string) string {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return "?"
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	v, _, _ = strings.Cut(v, " ")
	return v
}
