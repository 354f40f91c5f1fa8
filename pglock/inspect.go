package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/jackc/pgx/v5"
)

// Inspect implements driver.Inspector: the key's row as the database sees it
// now. LastToken is the token of the key's row, also after the holding
// expired, until the row is released or swept. Waiters is
// driver.WaitersUnknown: a plain lock's waiters wait in their own processes
// (FairDriver.Inspect counts its queue). An inspection never creates a table:
// in a database without one it returns an error matching ErrNoTable.
func (d *Driver) Inspect(ctx context.Context, key string) (dlock.LockInfo, error) {
	info := dlock.LockInfo{Key: key, Waiters: driver.WaitersUnknown}
	if d == nil {
		return info, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return info, err
	}
	var owner, meta string
	var token, us int64
	var held bool
	err := d.doOn(ctx, "inspect", partNone, func(ctx context.Context) error {
		err := d.pool.QueryRow(ctx, d.q.inspect, key).Scan(&owner, &token, &meta, &us, &held)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return info, err
	}
	info.LastToken = uint64(max(token, 0))
	if held {
		info.Held, info.Owner, info.Token, info.Metadata = true, owner, uint64(token), meta
		info.TTL = time.Duration(us) * time.Microsecond
		info.Holders, info.Limit, info.Kind = 1, 1, driver.KindMutex
	}
	return info, nil
}

// ListPrefix implements driver.Inspector: the held locks whose keys start with
// prefix, as the database selects them.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	if d == nil {
		return nil, errNilDriver
	}
	var out []dlock.LockInfo
	err := d.doOn(ctx, "list", partNone, func(ctx context.Context) error {
		out = out[:0]
		rows, err := d.pool.Query(ctx, d.q.list, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			info := dlock.LockInfo{Waiters: driver.WaitersUnknown}
			var token, us int64
			if err := rows.Scan(&info.Key, &info.Owner, &token, &info.Metadata, &us); err != nil {
				return err
			}
			if !strings.HasPrefix(info.Key, prefix) {
				continue
			}
			info.Held, info.Token, info.LastToken = true, uint64(token), uint64(token)
			info.TTL = time.Duration(us) * time.Microsecond
			info.Holders, info.Limit, info.Kind = 1, 1, driver.KindMutex
			out = append(out, info)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector: it removes the key's live holding,
// whoever holds it, notifies its waiters and its holder (which loses its
// Lease at once, see loss.go), and returns what it removed. It does
// not wait for transactions fenced on the key, but the next grant does (see
// Fence). A free lock is dlock.ErrNotHeld.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (dlock.LockInfo, error) {
	info := dlock.LockInfo{Key: key, Waiters: driver.WaitersUnknown}
	if d == nil {
		return info, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return info, err
	}
	found := false
	err := d.doOn(ctx, "force unlock", partNone, func(ctx context.Context) error {
		var token, us int64
		var notified bool
		err := d.pool.QueryRow(ctx, d.q.forceUnlock, key, d.channel).Scan(&info.Owner, &token, &info.Metadata, &us, &notified)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		info.Held, info.Token, info.LastToken = true, uint64(token), uint64(token)
		info.TTL = time.Duration(us) * time.Microsecond
		info.Holders, info.Limit, info.Kind = 1, 1, driver.KindMutex
		return nil
	})
	if err != nil {
		return dlock.LockInfo{Key: key}, err
	}
	if !found {
		return info, fmt.Errorf("%w: pglock: %q is free", dlock.ErrNotHeld, key)
	}
	d.pushLoss(ctx, key)
	return info, nil
}
