package verify

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/mysqllock"
	"github.com/go-sql-driver/mysql"
)

// MariaDB: one server behind a proxy; the plain lock, the fair lock and the
// semaphore.
func init() {
	registerBackend(&backend{
		name:      "mysql",
		faults:    []string{FaultCrash, FaultTerminate, FaultForce},
		start:     startMySQL,
		locker:    myLocker,
		inspector: myInspector,
		sync:      mySync,
		leftover:  myLeftover,
		fault:     myFault,
		resize:    myResize,
		exact:     true, // no fault excuses two holders
		grace: func(s Spec) time.Duration {
			if s.Kind == "fair" {
				// A queue entry of a waiter that died stays in the
				// way FairWaiterTTL.
				return time.Second + mysqllock.FairWaiterTTL
			}
			return time.Second
		},
	})
}

// startMySQL starts the server; the workers' DSN names its proxy.
func startMySQL(t testing.TB, _ Config) *store {
	m := testserver.StartMariaDB(t)
	st := &store{own: m, nodes: 1}
	px := st.proxyTo(t, m.Addr)
	st.addrs = []string{strings.Replace(m.DSN, m.Addr, px.Addr(), 1)}
	return st
}

// myDSN is the DSN of st's server itself (not through the proxy).
func myDSN(st *store) string { return st.own.(*testserver.MariaDB).DSN }

// openMy opens a *sql.DB on dsn whose dials give up after a second.
func openMy(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = time.Second
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(c), nil
}

// myLocker returns mysqllock's Client (the semaphore's for Kind sem, the fair
// lock's for Kind fair) on s's DSN.
func myLocker(s Spec) (dlock.Locker, func(), error) {
	db, err := openMy(s.Lock[0])
	if err != nil {
		return nil, func() {}, err
	}
	closeDB := func() { _ = db.Close() }
	opts := []mysqllock.Option{mysqllock.WithCreateTable(), mysqllock.WithRequestTimeout(500 * time.Millisecond)}
	if s.Kind == "sem" {
		sd, err := mysqllock.NewSemaphoreDriver(db, s.N, opts...)
		if err != nil {
			closeDB()
			return nil, func() {}, err
		}
		lk, err := dlock.NewClient(sd)
		return lk, closeDB, err
	}
	if s.Kind == "fair" {
		f, err := mysqllock.NewFairDriver(db, opts...)
		if err != nil {
			closeDB()
			return nil, func() {}, err
		}
		lk, err := dlock.NewClient(f)
		return lk, closeDB, err
	}
	d, err := mysqllock.NewDriver(db, opts...)
	if err != nil {
		closeDB()
		return nil, func() {}, err
	}
	lk, err := mysqllock.NewClient(d)
	return lk, closeDB, err
}

// mySync returns mysqllock's latch and barrier driver on s's DSN.
func mySync(s SyncSpec) (driver.SyncDriver, func(), error) {
	db, err := openMy(s.Addr[0])
	if err != nil {
		return nil, func() {}, err
	}
	d, err := mysqllock.NewDriver(db, mysqllock.WithRequestTimeout(2*time.Second), mysqllock.WithCreateTable())
	return d, func() { _ = db.Close() }, err
}

// myInspector returns mysqllock's Driver (the fair lock's for Kind fair, whose
// force-unlock wakes the head of the queue) over a *sql.DB of its own,
// straight to the server.
func myInspector(c Config, st *store) (driver.Inspector, func(), error) {
	db, err := openMy(myDSN(st))
	if err != nil {
		return nil, func() {}, err
	}
	var in driver.Inspector
	if c.Spec.Kind == "fair" {
		in, err = mysqllock.NewFairDriver(db, mysqllock.WithCreateTable())
	} else {
		in, err = mysqllock.NewDriver(db, mysqllock.WithCreateTable())
	}
	if err != nil {
		_ = db.Close()
		return nil, func() {}, err
	}
	return in, func() { _ = db.Close() }, nil
}

// myResize returns a semaphore Client that adopts the stored size.
func myResize(_ Config, st *store) (*dlock.Client, func(), error) {
	db, err := openMy(myDSN(st))
	if err != nil {
		return nil, nil, err
	}
	s, err := mysqllock.NewSemaphoreDriver(db, mysqllock.StoredSize, mysqllock.WithCreateTable())
	if err == nil {
		var cl *dlock.Client
		cl, err = dlock.NewClient(s)
		return cl, func() { _ = db.Close() }, err
	}
	_ = db.Close()
	return nil, nil, err
}

// myFault injects MariaDB's faults: a crash and restart (SIGKILL), and every
// other client connection killed.
func myFault(_ context.Context, _ Config, st *store, f string, _ draws, rec *Recorder) (bool, error) {
	m := st.own.(*testserver.MariaDB)
	do, what := m.Restart, "restarting MariaDB"
	switch f {
	case FaultCrash:
	case FaultTerminate:
		do, what = func() error { return killConnections(m.DSN) }, "KILL CONNECTION"
	default:
		return false, nil
	}
	rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
	if f == FaultTerminate {
		cut, err := closedByServer(st, do)
		if err != nil {
			return true, fmt.Errorf("verify: %s: %v", what, err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1, Cut: cut})
		return true, nil
	}
	if err := do(); err != nil {
		return true, fmt.Errorf("verify: %s: %v", what, err)
	}
	rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
	return true, nil
}

// killConnections ends every other client connection to the MariaDB at dsn.
func killConnections(dsn string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	db, err := openMy(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	rows, err := conn.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE id <> CONNECTION_ID() AND command <> 'Daemon' AND user <> 'system user'")
	if err != nil {
		return err
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err
		}
		ids = append(ids, id)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	for _, id := range ids {
		_, _ = conn.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)) // gone meanwhile: nothing to kill
	}
	return nil
}

// myLeftover lists the rows of locks and semaphore permits still held.
func myLeftover(t testing.TB, st *store) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, err := openMy(myDSN(st))
	if err != nil {
		t.Errorf("verify: connecting to MariaDB: %v", err)
		return nil
	}
	defer db.Close()
	var keys []string
	for _, q := range []string{
		"SELECT lock_key FROM " + mysqllock.DefaultTable + " WHERE owner <> X'' AND expires_at > UTC_TIMESTAMP(6)",
		"SELECT sem_key FROM " + mysqllock.DefaultTable + "_sem WHERE owner <> X'' AND expires_at > UTC_TIMESTAMP(6)",
	} {
		rows, err := db.QueryContext(ctx, q)
		if me, ok := err.(*mysql.MySQLError); ok && me.Number == 1146 {
			continue // a kind of lock the run did not use
		}
		if err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
			return nil
		}
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err == nil {
				keys = append(keys, k)
			}
		}
		if err := rows.Close(); err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
		}
	}
	return keys
}

// myNoCheckLock is the lock of the mysqlnocheck variant: mysqllock whose
// release frees the key's row whoever holds it.
func myNoCheckLock(s Spec) (dlock.Locker, func(), error) {
	db, err := openMy(s.Lock[0])
	if err != nil {
		return nil, func() {}, err
	}
	d, err := mysqllock.NewDriver(db, mysqllock.WithCreateTable(), mysqllock.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		_ = db.Close()
		return nil, func() {}, err
	}
	lk, err := dlock.NewClient(noCheckDriver{d, db})
	return lk, func() { _ = db.Close() }, err
}

// noCheckDriver is mysqllock's Driver with a release that does not check the
// owner.
type noCheckDriver struct {
	*mysqllock.Driver
	db *sql.DB
}

// Release frees the key's row, whoever holds it: the driver's own release
// (which wakes the next waiter), of the owner the row names now.
func (n noCheckDriver) Release(ctx context.Context, h driver.Holding) error {
	var owner []byte
	err := n.db.QueryRowContext(ctx, "SELECT owner FROM "+mysqllock.DefaultTable+" WHERE lock_key = ?", h.Key).Scan(&owner)
	if err != nil {
		return err
	}
	if len(owner) > 0 {
		h.Owner = string(owner)
	}
	return n.Driver.Release(ctx, h)
}
