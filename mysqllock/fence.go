package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// Fence checks, inside the caller's transaction tx (on the database of the
// lock table, from the same *sql.DB or another), that lease still holds its
// key: the key's row names the lease's owner and token and has not expired by
// the server's clock. It then keeps a shared lock of the row (LOCK IN SHARE
// MODE) until tx ends, so that the key cannot change hands before tx commits
// or rolls back.
//
// The guarantee: if Fence returns nil and tx then commits, no other holder
// was granted the key before the commit. Every grant of the key to another
// owner writes the row, and so waits for tx to end; writes made in tx are
// thus ordered before everything the next holder does in this database,
// whatever the pauses of the holder and the drift of any clock. When the
// lease was lost before Fence (expired, released, taken over), Fence returns
// an error matching dlock.ErrNotHeld (and dlock.ErrStaleToken when the key
// was granted since with a newer token), tx stays usable, and the caller must
// roll back. Fence may come anywhere before the commit: as the last statement
// it covers those before it too.
//
// The limits: the guarantee covers writes to this database made in tx, not
// writes to other systems (pass them lease.Token() and let them check it).
// Unlike PostgreSQL's, InnoDB's shared lock also holds up the key's renewals,
// releases and force-unlocks until tx ends (each waits at most
// innodb_lock_wait_timeout, then fails as dlock.ErrUnavailable and the
// renewal is tried again), and the next holder waits for tx too: keep fenced
// transactions short. In REPEATABLE READ, InnoDB's locking read sees the
// newest committed row, not tx's snapshot, so Fence judges the lock as it is.
func (d *Driver) Fence(ctx context.Context, tx *sql.Tx, lease *dlock.Lease) error {
	if d == nil {
		return errNilDriver
	}
	if tx == nil {
		return fmt.Errorf("%w: mysqllock: Fence: nil transaction", driver.ErrInvalid)
	}
	if lease == nil || lease.Token() == 0 {
		return fmt.Errorf("%w: mysqllock: Fence: no lease", driver.ErrInvalid)
	}
	key := lease.Key()
	var owner string
	var token int64
	var live, found bool
	err := d.do(ctx, "fence", func(ctx context.Context) error {
		err := tx.QueryRowContext(ctx, `SELECT owner, token, owner <> X'' AND expires_at > `+now+` FROM `+d.table+`
WHERE lock_key = `+lit(key)+` LOCK IN SHARE MODE`).Scan(&owner, &token, &live)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		return err
	case !found:
		return fmt.Errorf("%w: mysqllock: fence: %q is free", driver.ErrNotHeld, key)
	case token > 0 && uint64(token) > lease.Token() && owner != lease.Owner():
		dlock.ReportStaleToken(lease, key, uint64(token))
		return fmt.Errorf("%w: mysqllock: fence: %q was granted since with token %d, newer than %d: %w", driver.ErrNotHeld, key, token, lease.Token(), driver.ErrStaleToken)
	case owner != lease.Owner() || uint64(token) != lease.Token():
		return fmt.Errorf("%w: mysqllock: fence: %q is not held by this lease", driver.ErrNotHeld, key)
	case !live:
		return fmt.Errorf("%w: mysqllock: fence: the lease on %q has expired", driver.ErrNotHeld, key)
	}
	return nil
}
