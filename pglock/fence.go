package pglock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/jackc/pgx/v5"
)

// Fence checks, inside the caller's transaction tx (on the database of the
// lock table), that lease still holds its key: the key's row names the
// lease's owner and token and has not expired by the database's clock. It then
// keeps the row locked (FOR KEY SHARE) until tx ends, so that the key cannot
// change hands before tx commits or rolls back.
//
// The guarantee: if Fence returns nil and tx then commits, no other holder was
// granted the key before the commit. Every grant of the key to another owner
// changes the row's token, a key column, and so waits for tx to end (releases,
// forced unlocks and the holder's renewals do not: they leave the token as it
// is). Writes made in tx are thus ordered before everything the next holder
// does in this database, whatever the pauses of the holder and the drift of
// any clock. When the lease was lost before Fence (expired, released, taken
// over), Fence returns an error matching dlock.ErrNotHeld (and
// dlock.ErrStaleToken when the key was granted since with a newer token), tx
// stays usable, and the caller must roll back. Other errors follow the
// Driver's (a request timeout ends tx's connection). Fence may come anywhere
// before the commit: as the last statement it covers those before it too.
//
// The limits: the guarantee covers writes to this database made in tx, not
// writes to other systems (pass them lease.Token() and let them check it);
// the lease may expire while tx runs, and the next holder then waits for tx to
// end, so keep fenced transactions short, and set
// idle_in_transaction_session_timeout so that a holder that stops inside one
// does not keep the key. In REPEATABLE READ or SERIALIZABLE, a row changed
// after tx's snapshot makes Fence fail with a serialization error
// (dlock.ErrUnavailable): retry the transaction.
func (d *Driver) Fence(ctx context.Context, tx pgx.Tx, lease *dlock.Lease) error {
	if d == nil {
		return errNilDriver
	}
	if driver.IsNil(tx) {
		return fmt.Errorf("%w: pglock: Fence: nil transaction", driver.ErrInvalid)
	}
	return d.fence(ctx, lease, func(ctx context.Context, key string, dest ...any) error {
		return tx.QueryRow(ctx, d.q.fence, key).Scan(dest...)
	})
}

// FenceSQL is Fence for a database/sql transaction (over the pgx stdlib
// driver, lib/pq, or any driver of PostgreSQL), with the same guarantee and
// limits.
func (d *Driver) FenceSQL(ctx context.Context, tx *sql.Tx, lease *dlock.Lease) error {
	if d == nil {
		return errNilDriver
	}
	if tx == nil {
		return fmt.Errorf("%w: pglock: FenceSQL: nil transaction", driver.ErrInvalid)
	}
	return d.fence(ctx, lease, func(ctx context.Context, key string, dest ...any) error {
		err := tx.QueryRowContext(ctx, d.q.fence, key).Scan(dest...)
		if errors.Is(err, sql.ErrNoRows) {
			return pgx.ErrNoRows
		}
		return err
	})
}

// fence runs the fence query through query and judges its row.
func (d *Driver) fence(ctx context.Context, lease *dlock.Lease, query func(ctx context.Context, key string, dest ...any) error) error {
	if lease == nil || lease.Token() == 0 {
		return fmt.Errorf("%w: pglock: Fence: no lease", driver.ErrInvalid)
	}
	key := lease.Key()
	var owner string
	var token int64
	var live, found bool
	err := d.do(ctx, "fence", func(ctx context.Context) error {
		err := query(ctx, key, &owner, &token, &live)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: pglock: fence: %q is free", driver.ErrNotHeld, key)
	case token > 0 && uint64(token) > lease.Token():
		dlock.ReportStaleToken(lease, key, uint64(token))
		return fmt.Errorf("%w: pglock: fence: %q was granted since with token %d, newer than %d: %w", driver.ErrNotHeld, key, token, lease.Token(), driver.ErrStaleToken)
	case owner != lease.Owner() || uint64(token) != lease.Token():
		return fmt.Errorf("%w: pglock: fence: %q is not held by this lease", driver.ErrNotHeld, key)
	case !live:
		return fmt.Errorf("%w: pglock: fence: the lease on %q has expired", driver.ErrNotHeld, key)
	}
	return nil
}
