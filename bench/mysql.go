package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	dlockdriver "github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/mysqllock"
	"github.com/go-sql-driver/mysql"
)

// onMySQL names MariaDB as the server a variant locks on.
const onMySQL = "mysql"

// myWrites counts the packets every measured MySQL connection has sent: the
// driver writes each text statement in one write. The bench's MariaDB has no
// other client, so this is what the server received.
var myWrites atomic.Int64

// mysqlVariants are mysqllock and what a MySQL user writes by hand,
// GET_LOCK and RELEASE_LOCK, each with a *sql.DB of its own per contender.
var mysqlVariants = []variant{
	{name: "mysql", lib: "mysql", in: inA | inBC, on: onMySQL, clientEach: true,
		desc: "mysqllock (NewDriver with CreateTable, all defaults: 15s TTL renewed by the watchdog, waiters woken by KILL QUERY of a sleeping connection), over a *sql.DB of its own per locker; a local MariaDB",
		open: openMySQL},
	{name: "mysql/fair", lib: "mysql", in: inA | inBC, on: onMySQL, clientEach: true,
		desc: "mysqllock.NewFairDriver with CreateTable, all defaults (15s TTL renewed by the watchdog, a queue table whose AUTO_INCREMENT orders the waiters, the head's Driver woken by KILL QUERY), over a *sql.DB of its own per locker; the same server",
		open: openMySQLFair},
	{name: "mysql/getlock", lib: "mysql-getlock", peer: true, in: inA | inBC, on: onMySQL, clientEach: true,
		desc: "SELECT GET_LOCK(name, timeout) on a connection held from the lock to RELEASE_LOCK (the server blocks the waiter and wakes it), a *sql.DB of its own per locker; no TTL, token or metadata",
		open: openGetLock},
}

// countedDB opens a *sql.DB of its own on the run's MariaDB, whose writes
// count as lock requests.
func countedDB(o opening) (*sql.DB, error) {
	if o.e == nil || o.e.cons.my == nil {
		return nil, fmt.Errorf("bench: no MariaDB server in this run")
	}
	cfg, err := mysql.ParseDSN(o.e.cons.my.DSN)
	if err != nil {
		return nil, err
	}
	cnt := o.cnt
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cnt.dials.Add(1)
		return myConn{countingConn{conn, cnt}}, nil
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	// One connection up front, so that no measurement waits for a dial.
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// myConn is a countingConn that also counts its writes in myWrites.
type myConn struct{ countingConn }

func (c myConn) Write(b []byte) (int, error) {
	myWrites.Add(1)
	return c.countingConn.Write(b)
}

// openMySQL opens a mysqllock Client on a *sql.DB of its own.
func openMySQL(o opening) (locker, error) {
	return openMySQLWith(o, func(db *sql.DB) (dlockdriver.Driver, error) {
		return mysqllock.NewDriver(db, mysqllock.WithCreateTable())
	})
}

// openMySQLFair opens a mysqllock Client of fair locks on a *sql.DB of its
// own.
func openMySQLFair(o opening) (locker, error) {
	return openMySQLWith(o, func(db *sql.DB) (dlockdriver.Driver, error) {
		return mysqllock.NewFairDriver(db, mysqllock.WithCreateTable())
	})
}

// openMySQLWith opens a Client over the driver that newd makes on a *sql.DB
// of its own.
func openMySQLWith(o opening, newd func(*sql.DB) (dlockdriver.Driver, error)) (locker, error) {
	db, err := countedDB(o)
	if err != nil {
		return nil, err
	}
	d, err := newd(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	c, err := dlock.NewClient(d)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return dlockLocker{c: c, close: db.Close}, nil
}

// openGetLock opens a *sql.DB of its own for GET_LOCK.
func openGetLock(o opening) (locker, error) {
	db, err := countedDB(o)
	if err != nil {
		return nil, err
	}
	return getLock{db}, nil
}

type getLock struct{ db *sql.DB }

func (g getLock) Close() error { return g.db.Close() }

// notified: GET_LOCK blocks the waiter in the server, which grants it at
// the release.
func (getLock) notified() bool { return true }

func (g getLock) mutex(key string) mutex {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	// GET_LOCK's names are at most 64 characters: a hash of the key.
	return &getLockMutex{db: g.db, name: fmt.Sprintf("dlock_%016x", h.Sum64())}
}

type getLockMutex struct {
	db   *sql.DB
	name string
	conn *sql.Conn // held from the lock to the unlock
}

func (m *getLockMutex) lock(ctx context.Context) error {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	// The server waits, for as long as ctx allows (whole seconds, at least
	// one); the statement is text, one round trip, as the driver sends a
	// query without arguments.
	secs := 3600
	if dl, ok := ctx.Deadline(); ok {
		secs = max(int(math.Ceil(time.Until(dl).Seconds())), 1)
	}
	var ok sql.NullInt64
	err = conn.QueryRowContext(ctx, fmt.Sprintf("SELECT GET_LOCK('%s', %d)", m.name, secs)).Scan(&ok)
	if err != nil || ok.Int64 != 1 {
		// A failed or cut wait: closing the connection ends its locks.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
		if err == nil || ctx.Err() != nil {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	m.conn = conn
	return nil
}

func (m *getLockMutex) unlock(ctx context.Context) error {
	conn := m.conn
	m.conn = nil
	defer conn.Close()
	var ok sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK('"+m.name+"')").Scan(&ok); err != nil {
		return err
	}
	if ok.Int64 != 1 {
		return errors.New("mysql/getlock: lock not held at unlock")
	}
	return nil
}

// myVersion returns the server's version, or "?".
func myVersion(ctx context.Context, dsn string) string {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return "?"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return "?"
	}
	v, _, _ = strings.Cut(v, "-")
	return v
}
