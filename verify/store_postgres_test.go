package verify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PostgreSQL: one server behind a proxy; the plain lock and the semaphore.
func init() {
	registerBackend(&backend{
		name:      "postgres",
		faults:    []string{FaultCrash, FaultTerminate, FaultForce},
		start:     startPostgres,
		locker:    pgLocker,
		inspector: pgInspector,
		sync:      pgSync,
		leftover:  pgLeftover,
		fault:     pgFault,
		resize:    pgResize,
		exact:     true, // no fault excuses two holders
	})
}

// startPostgres starts the server; the workers' URL names its proxy.
func startPostgres(t testing.TB, _ Config) *store {
	pg := testserver.StartPostgres(t)
	st := &store{own: pg, nodes: 1}
	px := st.proxyTo(t, pg.Addr)
	st.addrs = []string{strings.Replace(pg.URL, pg.Addr, px.Addr(), 1)}
	return st
}

// pgURL is the URL of st's server itself (not through the proxy).
func pgURL(st *store) string { return st.own.(*testserver.Postgres).URL }

// pgLocker returns pglock's Client (the semaphore's, for Kind sem) on s's URL.
func pgLocker(s Spec) (dlock.Locker, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(s.Lock[0])
	if err != nil {
		return nil, func() {}, err
	}
	cfg.ConnConfig.ConnectTimeout = time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, func() {}, err
	}
	opts := []pglock.Option{pglock.WithCreateTable(), pglock.WithRequestTimeout(500 * time.Millisecond)}
	if s.Kind == "sem" {
		sd, err := pglock.NewSemaphoreDriver(pool, s.N, opts...)
		if err != nil {
			pool.Close()
			return nil, func() {}, err
		}
		lk, err := dlock.NewClient(sd)
		return lk, pool.Close, err
	}
	d, err := pglock.NewDriver(pool, opts...)
	if err != nil {
		pool.Close()
		return nil, func() {}, err
	}
	lk, err := pglock.NewClient(d)
	return lk, pool.Close, err
}

// pgSync returns pglock's latch and barrier driver on s's URL.
func pgSync(s SyncSpec) (driver.SyncDriver, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, s.Addr[0])
	if err != nil {
		return nil, func() {}, err
	}
	d, err := pglock.NewDriver(pool, pglock.WithRequestTimeout(2*time.Second))
	return d, pool.Close, err
}

// pgInspector returns pglock's Driver over a pool of its own, straight to the
// server.
func pgInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, pgURL(st))
	if err != nil {
		return nil, func() {}, err
	}
	d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
	if err != nil {
		pool.Close()
		return nil, func() {}, err
	}
	return d, pool.Close, nil
}

// pgResize returns a semaphore Client that adopts the stored size.
func pgResize(_ Config, st *store) (*dlock.Client, func(), error) {
	pool, err := pgxpool.New(context.Background(), pgURL(st))
	if err != nil {
		return nil, nil, err
	}
	s, err := pglock.NewSemaphoreDriver(pool, pglock.StoredSize, pglock.WithCreateTable())
	if err == nil {
		var cl *dlock.Client
		cl, err = dlock.NewClient(s)
		return cl, pool.Close, err
	}
	pool.Close()
	return nil, nil, err
}

// pgFault injects PostgreSQL's faults: a restart, and every client
// connection ended.
func pgFault(_ context.Context, _ Config, st *store, f string, _ draws, rec *Recorder) (bool, error) {
	pg := st.own.(*testserver.Postgres)
	switch f {
	case FaultCrash:
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		if err := pg.Restart(); err != nil {
			return true, fmt.Errorf("verify: restarting PostgreSQL: %v", err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		return true, nil
	case FaultTerminate:
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		cut, err := closedByServer(st, func() error { return terminateBackends(pg.URL) })
		if err != nil {
			return true, fmt.Errorf("verify: pg_terminate_backend: %v", err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1, Cut: cut})
		return true, nil
	}
	return false, nil
}

// closedByServer runs end, which ends client connections on the server's side,
// and returns how many of the workers' connections (through st's proxies) the
// server closed: it waits for the proxies to see them close, for at most a
// second, until their count has stopped growing for a poll.
func closedByServer(st *store, end func() error) (int, error) {
	before := serverCloses(st.proxies)
	if err := end(); err != nil {
		return 0, err
	}
	last, deadline := before, time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n := serverCloses(st.proxies)
		if n > before && n == last {
			break
		}
		last = n
	}
	return serverCloses(st.proxies) - before, nil
}

// terminateBackends ends every other connection to the PostgreSQL at url.
func terminateBackends(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'")
	return err
}

// pgLeftover lists the rows of locks and semaphore permits still held
// (expired rows stay until the next acquisition of their key takes them over:
// they hold nothing).
func pgLeftover(t testing.TB, st *store) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgURL(st))
	if err != nil {
		t.Errorf("verify: connecting to PostgreSQL: %v", err)
		return nil
	}
	defer conn.Close(ctx)
	var keys []string
	for _, table := range []string{pglock.DefaultTable, pglock.DefaultTable + "_sem"} { // the locks', the semaphores'
		var there bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&there); err != nil || !there {
			continue // a kind of lock the run did not use
		}
		rows, err := conn.Query(ctx, "SELECT key FROM "+table+" WHERE owner <> '' AND expires_at > clock_timestamp()")
		if err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
			return nil
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("verify: reading the locks' table: %v", err)
		}
		keys = append(keys, held...)
	}
	return keys
}
