package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStore is a store in a PostgreSQL database (pglock's lease table, which
// run creates when missing and inspection never does): the exclusive lock,
// the fair lock and semaphores.
type pgStore struct {
	*mutexStore
	pool *pgxpool.Pool
}

func (s pgStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	switch kind {
	case plainLock:
		return s.newc(opts...)
	case fairLock:
		d, err := pglock.NewFairDriver(s.pool, pglock.WithCreateTable())
		if err != nil {
			return nil, err
		}
		return dlock.NewClient(d, opts...)
	case semaphoreLock:
		d, err := pglock.NewSemaphoreDriver(s.pool, permits, pglock.WithCreateTable())
		if err != nil {
			return nil, err
		}
		return dlock.NewClient(d, opts...)
	}
	return nil, usageErrorf("-s and -x are not available on %s: it has no read-write lock", s.where)
}

// resizer returns the semaphores' Resizer of s.
func (s pgStore) resizer() (driver.Resizer, error) {
	return pglock.NewSemaphoreDriver(s.pool, pglock.StoredSize, pglock.WithCreateTable())
}

// openPostgres connects to the PostgreSQL database at raw (a postgres:// URL,
// a key=value connection string, or host:port) and checks that it answers.
func openPostgres(ctx context.Context, raw string, tf *tlsFiles) (store, error) {
	conn := raw
	if !strings.Contains(raw, "://") && !strings.Contains(raw, "=") {
		hp, err := hostPort(raw)
		if err != nil {
			return nil, err
		}
		conn = "postgres://" + hp + "/"
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, usageErrorf("bad PostgreSQL URL: %v", redact(err.Error(), raw))
	}
	cfg.ConnConfig.ConnectTimeout = dialTimeout
	if tf.set() {
		// The files add to what the URL's sslmode asks for (sslmode=require or
		// stricter turns TLS on).
		if cfg.ConnConfig.TLSConfig == nil {
			return nil, usageErrorf("--tls-* with a PostgreSQL URL whose sslmode does not use TLS: add ?sslmode=verify-full (or require)")
		}
		if cfg.ConnConfig.TLSConfig, err = tf.apply(cfg.ConnConfig.TLSConfig); err != nil {
			return nil, err
		}
	}
	where := "PostgreSQL at " + net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, unavailableErrorf("cannot reach %s: %v", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, pgConnectError(where, raw, err)
	}
	d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
	if err != nil {
		pool.Close()
		return nil, err
	}
	c, err := pglock.NewClient(d)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pgStore{pool: pool, mutexStore: &mutexStore{
		where:  where,
		newc:   func(opts ...dlock.Option) (dlock.Locker, error) { return pglock.NewClient(d, opts...) },
		insp:   tableInspector{c, where, pglock.ErrNoTable},
		plain:  driver.KindMutex,
		sync:   d,
		closer: pool.Close,
		purge: func(ctx context.Context, keys []string) (int, error) {
			tag, err := pool.Exec(ctx, "DELETE FROM "+pglock.DefaultTable+" WHERE key = ANY($1)", keys)
			if isUndefinedTable(err) {
				return 0, nil
			}
			return int(tag.RowsAffected()), err
		},
	}}, nil
}

// isUndefinedTable reports whether err is PostgreSQL's "relation does not
// exist" (SQLSTATE 42P01).
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}

// pgConnectError explains why the PostgreSQL server at where (connection
// string raw) did not let dlock in, without its password: the server's reason
// when it answered, else each address's failure, leaving out the TLS attempt
// that sslmode=prefer (the default) makes before a plain one.
func pgConnectError(where, raw string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		msg := pe.Message + " (SQLSTATE " + pe.Code + ")"
		if pe.Detail != "" {
			msg += ": " + pe.Detail
		}
		if pe.Hint != "" {
			msg += "; hint: " + pe.Hint
		}
		return unavailableErrorf("%s refused: %s", where, redact(msg, raw))
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return unavailableErrorf("cannot reach %s: %s", where, redact(oneLine(err), raw))
	}
	var attempts []string
	inner := errors.Unwrap(ce)
	if j, ok := inner.(interface{ Unwrap() []error }); ok {
		for _, a := range j.Unwrap() {
			attempts = append(attempts, a.Error())
		}
	} else if inner != nil {
		attempts = append(attempts, inner.Error())
	}
	var kept []string
	for i, a := range attempts {
		// A refused TLS attempt followed by another one is the fallback of
		// sslmode=prefer, not the reason.
		if i+1 < len(attempts) && strings.Contains(a, "): tls error: ") || slices.Contains(kept, a) {
			continue
		}
		kept = append(kept, a)
	}
	if len(kept) == 0 {
		return unavailableErrorf("cannot reach %s: %s", where, redact(oneLine(err), raw))
	}
	return unavailableErrorf("cannot reach %s: %s", where, redact(strings.Join(kept, "; "), raw))
}

// tableInspector is the inspector of a store in a database (pgStore,
// mysqlStore): in a database without the lock table (which it does not
// create) a list is empty, and an inspection or a force of a key says there
// is no table, exit 1. missing is the backend's error of a missing table.
type tableInspector struct {
	in      driver.Inspector
	where   string
	missing error
}

func (p tableInspector) noTable(err error) error {
	if errors.Is(err, p.missing) {
		return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf("no dlock table in %s: nothing has been locked there (dlock run creates the table; status, list, unlock, top and serve create nothing)", p.where)}
	}
	return err
}

func (p tableInspector) Inspect(ctx context.Context, key string) (dlock.LockInfo, error) {
	info, err := p.in.Inspect(ctx, key)
	return info, p.noTable(err)
}

// ListPrefix lists nothing in a database without the lock table: nothing has
// been locked there.
func (p tableInspector) ListPrefix(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	infos, err := p.in.ListPrefix(ctx, prefix)
	if errors.Is(err, p.missing) {
		return nil, nil
	}
	return infos, err
}

func (p tableInspector) ForceUnlock(ctx context.Context, key string) (dlock.LockInfo, error) {
	info, err := p.in.ForceUnlock(ctx, key)
	return info, p.noTable(err)
}
