package main

import (
	"context"
	"errors"
	"hash/fnv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgAdvisoryVariant is PostgreSQL's own lock, the baseline of the pg variant:
// pg_try_advisory_lock on a connection taken from a pgxpool of its own per
// locker, polled every fixedRetry while the key is taken, and
// pg_advisory_unlock on the same connection. It has no TTL, no token, no
// metadata and no notified wait: the lock lives as long as the connection.
var pgAdvisoryVariant = variant{name: "pg/advisory", lib: "pg-advisory", peer: true, retry1ms: true,
	in: inA | inBC, on: onPG, clientEach: true,
	desc: "pg_try_advisory_lock(FNV-64 of the key) polled every 1ms on a connection held from the lock to pg_advisory_unlock, a pgxpool of its own per locker; no TTL, token or metadata",
	open: openPGAdvisory}

// openPGAdvisory opens a pgxpool of its own, whose writes count as lock
// requests.
func openPGAdvisory(o opening) (locker, error) {
	pool, err := countedPGPool(o)
	if err != nil {
		return nil, err
	}
	return pgAdvisory{pool}, nil
}

type pgAdvisory struct{ pool *pgxpool.Pool }

func (a pgAdvisory) Close() error { a.pool.Close(); return nil }

func (pgAdvisory) notified() bool { return false }

func (a pgAdvisory) mutex(key string) mutex {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return &pgAdvisoryMutex{pool: a.pool, id: int64(h.Sum64())}
}

type pgAdvisoryMutex struct {
	pool *pgxpool.Pool
	id   int64
	conn *pgxpool.Conn // held from the lock to the unlock
}

func (m *pgAdvisoryMutex) lock(ctx context.Context) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	var p poller
	defer p.stop()
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", m.id).Scan(&ok); err != nil {
			// The outcome is unknown: closing the connection ends its locks.
			_ = conn.Conn().Close(context.Background())
			conn.Release()
			if ctx.Err() != nil {
				return errors.Join(errNotObtained, err)
			}
			return err
		}
		if ok {
			m.conn = conn
			return nil
		}
		if err := p.pause(ctx); err != nil {
			conn.Release()
			return err
		}
	}
}

func (m *pgAdvisoryMutex) unlock(ctx context.Context) error {
	conn := m.conn
	m.conn = nil
	defer conn.Release()
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", m.id).Scan(&ok); err != nil {
		_ = conn.Conn().Close(context.Background())
		return err
	}
	if !ok {
		return errors.New("pg/advisory: lock not held at unlock")
	}
	return nil
}
