package pglock

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// inspection is the driver.Inspector of one kind of lock in a Driver's
// tables (Driver, FairDriver and SemaphoreDriver hold one): the kind's
// statements, and the kind it names a held lock. Each statement returns a row
// per holding of a key (one for an exclusive lock, one per permit in use of a
// semaphore):
//
//   - inspect ($1 key): owner, token, metadata, µs left, the holders the key
//     admits, whether it is held, and the µs left of its lock-delay; a row
//     that is not held gives LastToken;
//   - list ($1 the pattern's literal prefix): key and the columns of inspect,
//     of the held rows and of those in their lock-delay;
//   - forceUnlock ($1 key, $2 channel): the held rows it freed, as inspect
//     reads them, and whether it notified;
//   - waiters ($1 key), when set: the number of queued waiters, whose table
//     may not exist yet (nobody queued). Without it a lock's waiters wait in
//     their own processes, unseen.
type inspection struct {
	d                                   *Driver
	kind                                string
	inspect, list, forceUnlock, waiters string
}

// holding is one row of an inspection.
type holding struct {
	owner, meta      string
	token, us, delay int64 // delay: µs left of the key's lock-delay
	n                int
}

// add counts h, held, into info: Holders is the holdings, Limit the holders
// the key admits, and Owner, Token, Metadata and TTL describe the holding
// that ends last.
func (in inspection) add(info *driver.LockInfo, h holding) {
	p := driver.LockInfo{Owner: h.owner, Token: uint64(h.token), Metadata: h.meta, TTL: time.Duration(h.us) * time.Microsecond}
	info.Held, info.Limit, info.Kind = true, h.n, in.kind
	info.Holders++
	if info.Holders == 1 || p.TTL > info.TTL {
		info.Owner, info.Token, info.Metadata, info.TTL = p.Owner, p.Token, p.Metadata, p.TTL
	}
	info.LastToken = max(info.LastToken, uint64(max(h.token, 0)))
}

// newInfo is the LockInfo of key before its rows are read: its waiters are
// unknown unless Inspect counts them.
func newInfo(key string) driver.LockInfo {
	return driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}
}

// Inspect implements driver.Inspector: the key's rows as the database sees
// them now. LastToken is the newest token of the key's rows, also after the
// holding expired, until a row is released or swept. An inspection never
// creates a table: in a database without one it returns an error matching
// ErrNoTable. Waiters is driver.WaitersUnknown: a plain lock's waiters wait in
// their own processes (FairDriver.Inspect counts its queue).
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	return d.inspection().Inspect(ctx, key)
}

// ListPrefix implements driver.Inspector: the held locks whose keys start
// with prefix, as the database selects them.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	return d.inspection().ListPrefix(ctx, prefix)
}

// ForceUnlock implements driver.Inspector: it frees the key's holding,
// whoever holds it, notifies the key's waiters and its holder (whose Lease is
// lost at once, see loss.go), and returns what it freed. It
// does not wait for transactions fenced on the key, but the next grant does
// (see Fence). A free lock is dlock.ErrNotHeld.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	return d.inspection().ForceUnlock(ctx, key)
}

// Inspect implements driver.Inspector, as Driver.Inspect, with the waiters
// queued.
func (f *FairDriver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	return f.inspection().Inspect(ctx, key)
}

// ListPrefix implements driver.Inspector, as Driver.ListPrefix.
func (f *FairDriver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	return f.inspection().ListPrefix(ctx, prefix)
}

// ForceUnlock implements driver.Inspector, as Driver.ForceUnlock: the head of
// the queue takes the lock next.
func (f *FairDriver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	return f.inspection().ForceUnlock(ctx, key)
}

// Inspect implements driver.Inspector: Holders is the permits in use, Limit
// the semaphore's n, and Owner, Token, Metadata and TTL describe the permit
// that ends last.
func (s *SemaphoreDriver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	return s.inspection().Inspect(ctx, key)
}

// ListPrefix implements driver.Inspector: the semaphores with permits in use
// whose keys start with prefix.
func (s *SemaphoreDriver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	return s.inspection().ListPrefix(ctx, prefix)
}

// ForceUnlock implements driver.Inspector: it frees every permit of key in
// use, notifies the waiters, and returns what it freed. A semaphore without a
// permit in use is dlock.ErrNotHeld.
func (s *SemaphoreDriver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	return s.inspection().ForceUnlock(ctx, key)
}

// inspection returns d's inspection; a nil Driver's answers errNilDriver.
func (d *Driver) inspection() inspection {
	if d == nil {
		return inspection{}
	}
	return d.in
}

// inspection returns f's inspection; a nil FairDriver's answers errNilDriver.
func (f *FairDriver) inspection() inspection {
	if f == nil {
		return inspection{}
	}
	return f.in
}

// inspection returns s's inspection; a nil SemaphoreDriver's answers
// errNilDriver.
func (s *SemaphoreDriver) inspection() inspection {
	if s == nil {
		return inspection{}
	}
	return s.in
}

// Inspect reads key's rows (see Driver.Inspect).
func (in inspection) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if in.d == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var info driver.LockInfo
	err := in.d.doOn(ctx, "inspect", partNone, func(ctx context.Context) error {
		info = newInfo(key)
		rows, err := in.d.pool.Query(ctx, in.inspect, key)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h holding
			var held bool
			if err := rows.Scan(&h.owner, &h.token, &h.meta, &h.us, &h.n, &held, &h.delay); err != nil {
				return err
			}
			if held {
				in.add(&info, h)
			}
			info.LastToken = max(info.LastToken, uint64(max(h.token, 0)))
			info.DelayLeft = max(info.DelayLeft, time.Duration(h.delay)*time.Microsecond)
		}
		if err := rows.Err(); err != nil || in.waiters == "" {
			return err
		}
		err = in.d.pool.QueryRow(ctx, in.waiters, key).Scan(&info.Waiters)
		if undefinedTable(err) {
			info.Waiters = 0 // nobody has queued here yet
			return nil
		}
		return err
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	return info, nil
}

// ListPrefix reads the held rows of keys that start with prefix, and those in
// their lock-delay.
func (in inspection) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if in.d == nil {
		return nil, errNilDriver
	}
	var out []driver.LockInfo
	err := in.d.doOn(ctx, "list", partNone, func(ctx context.Context) error {
		out = out[:0]
		at := map[string]int{} // a key's place in out
		rows, err := in.d.pool.Query(ctx, in.list, prefix)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var key string
			var h holding
			var held bool
			if err := rows.Scan(&key, &h.owner, &h.token, &h.meta, &h.us, &h.n, &held, &h.delay); err != nil {
				return err
			}
			if !held && h.delay <= 0 {
				continue
			}
			i, ok := at[key]
			if !ok {
				i, at[key] = len(out), len(out)
				out = append(out, newInfo(key))
			}
			if held {
				in.add(&out[i], h)
			}
			out[i].LastToken = max(out[i].LastToken, uint64(max(h.token, 0)))
			out[i].DelayLeft = max(out[i].DelayLeft, time.Duration(h.delay)*time.Microsecond)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ForceUnlock frees every holding of key and returns what it freed; a free
// lock is dlock.ErrNotHeld.
func (in inspection) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if in.d == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var info driver.LockInfo
	err := in.d.doOn(ctx, "force unlock", partNone, func(ctx context.Context) error {
		info = newInfo(key)
		rows, err := in.d.pool.Query(ctx, in.forceUnlock, key, in.d.channel)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var h holding
			var notified bool
			if err := rows.Scan(&h.owner, &h.token, &h.meta, &h.us, &h.n, &notified); err != nil {
				return err
			}
			in.add(&info, h)
		}
		return rows.Err()
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	if !info.Held {
		return info, fmt.Errorf("%w: pglock: %q is free", driver.ErrNotHeld, key)
	}
	in.d.pushLoss(ctx, key) // its holders lose their Leases at once (loss.go)
	return info, nil
}
