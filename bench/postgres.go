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
func openPG(o opening) (locker, error) { return openPGWith(o, pglock.WithCreateTable()) }

// openPGUnlogged is openPG on an UNLOGGED table of its own.
func openPGUnlogged(o opening) (locker, error) {
	return openPGWith(o, pglock.WithCreateTable(), pglock.WithUnlogged(), pglock.WithTable("dlock_unlogged"))
}

func openPGWith(o opening, opts ...pglock.Option) (locker, error) {
	pool, err := countedPGPool(o)
	if err != nil {
		return nil, err
	}
	d, err := pglock.NewDriver(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	c, err := pglock.NewClient(d)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return dlockLocker{c: c, close: func() error { pool.Close(); return nil }}, nil
}

// countedPGPool opens a connection pool of its own on the run's PostgreSQL,
// whose writes count as lock requests (client and server side alike).
func countedPGPool(o opening) (*pgxpool.Pool, error) {
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
		return pgConn{countingConn{conn, cnt}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// One connection up front, so that no measurement waits for a dial.
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// pgConn is a countingConn that also counts its writes in pgWrites.
type pgConn struct{ countingConn }

func (c pgConn) Write(b []byte) (int, error) {
	pgWrites.Add(1)
	return c.countingConn.Write(b)
}

// pgCPU returns the CPU time (user and system) of the PostgreSQL server whose
// postmaster is pid: its own, its exited children's, and that of the children
// still running (one backend per connection, and the background workers).
func pgCPU(pid int) (time.Duration, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	total, err := ticks(pid, f[11:15])
	if err != nil {
		return 0, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	parent := strconv.Itoa(pid)
	for _, ent := range ents {
		child, err := strconv.Atoi(ent.Name())
		if err != nil || child == pid {
			continue
		}
		cf, err := procStat(child)
		if err != nil || cf[1] != parent {
			continue // gone meanwhile, or not a child
		}
		if t, err := ticks(child, cf[11:13]); err == nil {
			total += t
		}
	}
	return total, nil
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
