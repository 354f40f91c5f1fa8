package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgLeaseVariant is the lease table a PostgreSQL user writes by hand: a row
// per key with its owner and expiry, taken by one UPDATE of an expired row
// (the key's first lock by an INSERT ... ON CONFLICT DO NOTHING), released by
// an UPDATE of the owner's row that expires it, polled every fixedRetry while
// the key is taken. Its lease is fixed (peerTTL, no renewal), it has no
// fencing token, no metadata and no notified wait; every contender has a
// pgxpool of its own.
var pgLeaseVariant = variant{name: "pg/lease", lib: "pg-lease", peer: true, retry1ms: true,
	in: inA | inBC, on: onPG, clientEach: true,
	desc: "a hand-written lease table (key, owner, expires_at): UPDATE ... SET owner, expires_at = now() + 10s WHERE key AND expires_at < now() RETURNING to take (INSERT ... ON CONFLICT DO NOTHING for a key's first row), UPDATE ... SET expires_at = '-infinity' WHERE key AND owner to release, polled every 1ms, a pgxpool of its own per locker; no renewal, token or metadata",
	open: openPGLease}

// The lease table follows PostgreSQL's advisory lock in the tables.
func init() {
	i := slices.IndexFunc(variants, func(v variant) bool { return v.name == pgAdvisoryVariant.name })
	variants = slices.Insert(variants, i+1, pgLeaseVariant)
}

// pgLeaseTable is the lease table of the pg/lease variant.
const pgLeaseTable = "bench_lease"

// pgLeaseCreate serializes the lockers' creation of the table: concurrent
// CREATE TABLE IF NOT EXISTS of one name can fail.
var pgLeaseCreate sync.Mutex

// The statements of the pg/lease variant: $1 key, $2 owner.
const (
	pgLeaseTake    = `UPDATE ` + pgLeaseTable + ` SET owner = $2, expires_at = now() + interval '10 seconds' WHERE key = $1 AND expires_at < now() RETURNING true`
	pgLeaseInsert  = `INSERT INTO ` + pgLeaseTable + ` (key, owner, expires_at) VALUES ($1, $2, now() + interval '10 seconds') ON CONFLICT (key) DO NOTHING RETURNING true`
	pgLeaseRelease = `UPDATE ` + pgLeaseTable + ` SET expires_at = '-infinity' WHERE key = $1 AND owner = $2`
)

// openPGLease opens a pgxpool of its own, whose writes count as lock
// requests, and creates the lease table if it does not exist.
func openPGLease(o opening) (locker, error) {
	pool, err := countedPGPool(o)
	if err != nil {
		return nil, err
	}
	pgLeaseCreate.Lock()
	defer pgLeaseCreate.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+pgLeaseTable+` (key text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)`); err != nil {
		pool.Close()
		return nil, err
	}
	return pgLease{pool}, nil
}

type pgLease struct{ pool *pgxpool.Pool }

func (l pgLease) Close() error { l.pool.Close(); return nil }

func (pgLease) notified() bool { return false }

func (l pgLease) mutex(key string) mutex { return &pgLeaseMutex{pool: l.pool, key: key} }

type pgLeaseMutex struct {
	pool  *pgxpool.Pool
	key   string
	row   bool   // the key's row is known to exist: take it by UPDATE alone
	owner string // the holder's random owner id, while held
}

func (m *pgLeaseMutex) lock(ctx context.Context) error {
	owner := randomToken()
	var p poller
	defer p.stop()
	for {
		q := pgLeaseTake
		if !m.row {
			q = pgLeaseInsert
		}
		var ok bool
		err := m.pool.QueryRow(ctx, q, m.key, owner).Scan(&ok)
		switch {
		case err == nil:
			m.row, m.owner = true, owner
			return nil
		case errors.Is(err, pgx.ErrNoRows):
			m.row = true // taken: by an insert of another, or a holder's row
		default:
			if ctx.Err() != nil {
				// The outcome is unknown: take back a lease that may have been granted.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_, _ = m.pool.Exec(cctx, pgLeaseRelease, m.key, owner)
				cancel()
				return errors.Join(errNotObtained, err)
			}
			return err
		}
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
}

func (m *pgLeaseMutex) unlock(ctx context.Context) error {
	owner := m.owner
	m.owner = ""
	tag, err := m.pool.Exec(ctx, pgLeaseRelease, m.key, owner)
	if err == nil && tag.RowsAffected() != 1 {
		err = errors.New("pg/lease: lease not held at release")
	}
	return err
}

// moreRecipes maps a dlock variant to the recipes it is compared with
// besides recipes'.
var moreRecipes = map[string][]string{
	"pg":          {"pg/lease"},
	"pg/unlogged": {"pg/lease"},
}

// recipesOf returns the recipes variant name is compared with, recipes' first.
func recipesOf(name string) []string {
	var out []string
	if r, ok := recipes[name]; ok {
		out = append(out, r)
	}
	return append(out, moreRecipes[name]...)
}
