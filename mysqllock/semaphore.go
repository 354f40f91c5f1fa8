package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// MaxPermits is the largest number of permits a semaphore may have.
const MaxPermits = 1 << 16

// StoredSize, in place of a number of permits, makes the driver of semaphores
// that take each key's stored size (see SemaphoreDriver.Resize) whatever it
// is, and otherwise the size of the key's holders; with neither, an
// acquisition fails with an error matching dlock.ErrConflict.
const StoredSize = -1

// SemaphoreDriver is the driver.Driver of counting semaphores of n permits in
// the database: at most n leases of a key are held at once, each with its own
// owner, fencing token, TTL and loss signal. It is also a driver.Notifier, a
// driver.Resizer and a driver.Inspector. Most users want NewSemaphore.
//
// A semaphore's permits are rows of their own table (the locks' table with
// "_sem" appended, created by Migrate): a header row per key (whose owner is
// empty) and one row per permit in use. An acquisition is one transaction
// that locks the header row first, so that the acquisitions of a key are
// serialized: it checks the number of permits the key is used with (a Client
// made with another n gets an error matching dlock.ErrConflict while any
// permit is held), finds the owner's permit (a retry gets it back) or takes a
// free one, and draws the token from the header, which keeps the key's newest
// one: tokens increase with every grant of the key. Releases and renewals
// touch the permit's row, and a release wakes the first Driver waiting. A
// semaphore and an exclusive lock of the same name are two locks.
//
// Resize (Client.Resize) changes the number of permits of a key for every
// Client: the size it stores in the key's header row is the truth from then
// on, and n is the initial size only. Clients made with the key's size before
// its first resize, or with the size in force, go on working under the size
// in force; others get an error matching dlock.ErrConflict, unless made with
// StoredSize, which adopts whatever is stored.
type SemaphoreDriver struct {
	d *Driver
	n int // 0: StoredSize
}

var (
	_ driver.Driver     = (*SemaphoreDriver)(nil)
	_ driver.Notifier   = (*SemaphoreDriver)(nil)
	_ driver.Inspector  = (*SemaphoreDriver)(nil)
	_ driver.TTLLimiter = (*SemaphoreDriver)(nil)
	_ driver.Resizer    = (*SemaphoreDriver)(nil)
)

// NewSemaphore returns a Client whose locks are counting semaphores of n
// permits in the DefaultTable's semaphore table of db's database (see
// SemaphoreDriver), with opts as the defaults of every call. It does no I/O.
// It returns an error matching dlock.ErrInvalid for n outside [1,
// MaxPermits] (but StoredSize), a nil db or a bad option.
func NewSemaphore(db *sql.DB, n int, opts ...dlock.Option) (*Client, error) {
	s, err := NewSemaphoreDriver(db, n)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(s, opts...)
}

// NewSemaphoreDriver returns the driver of semaphores of n permits (or
// StoredSize) over db, in the semaphore table of the table that opts name
// (see NewDriver). It does no I/O. It returns an error matching
// dlock.ErrInvalid for n outside [1, MaxPermits] (but StoredSize), a nil db
// or a bad option.
func NewSemaphoreDriver(db *sql.DB, n int, opts ...Option) (*SemaphoreDriver, error) {
	if n != StoredSize {
		if err := checkPermits(n); err != nil {
			return nil, err
		}
	}
	d, err := NewDriver(db, opts...)
	if err != nil {
		return nil, err
	}
	return &SemaphoreDriver{d: d, n: max(n, 0)}, nil
}

// checkPermits returns an error matching dlock.ErrInvalid unless n is in [1,
// MaxPermits].
func checkPermits(n int) error {
	if n < 1 || n > MaxPermits {
		return fmt.Errorf("%w: mysqllock: %d permits outside [1, %d]", driver.ErrInvalid, n, MaxPermits)
	}
	return nil
}

// limitError is the error of a semaphore used with another number of permits.
type limitError struct {
	key       string
	n, stored int
}

func (e *limitError) Error() string {
	if e.stored == 0 {
		return fmt.Sprintf("mysqllock: semaphore %q has no stored size to adopt", e.key)
	}
	return fmt.Sprintf("mysqllock: semaphore %q has %d permits, not %d", e.key, e.stored, e.n)
}

// Is makes a limitError match dlock.ErrConflict.
func (e *limitError) Is(target error) bool { return target == driver.ErrConflict }

// Info implements driver.Driver: the semaphore of MySQL.
func (s *SemaphoreDriver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "mysqllock", Kind: driver.KindSemaphore}
}

// TTLLimits implements driver.TTLLimiter.
func (s *SemaphoreDriver) TTLLimits() driver.TTLLimits { return driver.DefaultTTLLimits }

// Subscribe implements driver.Notifier, as Driver.Subscribe: a waiter is woken
// when a permit of its key is released, or the key resized.
func (s *SemaphoreDriver) Subscribe(ctx context.Context, h driver.Holding) (<-chan struct{}, func(), error) {
	if s == nil {
		return nil, nil, errNilDriver
	}
	return s.d.Subscribe(ctx, h)
}

// header locks key's header row in tx, making it first when missing, and
// returns its stored size and base (the size before the first resize).
func (s *SemaphoreDriver) header(ctx context.Context, tx *sql.Tx, key string) (size, base int, token int64, err error) {
	if _, err = tx.ExecContext(ctx, `INSERT INTO `+s.d.sem+` (sem_key, owner, token, expires_at, metadata)
VALUES (`+lit(key)+`, X'', 0, `+now+`, X'') ON DUPLICATE KEY UPDATE token = token`); err != nil {
		return 0, 0, 0, err
	}
	err = tx.QueryRowContext(ctx, `SELECT size, base, token FROM `+s.d.sem+` WHERE sem_key = `+lit(key)+` AND owner = X'' FOR UPDATE`).Scan(&size, &base, &token)
	return size, base, token, err
}

// permit is one live permit of a key.
type permit struct {
	owner string
	n     int
	us    int64
}

// Acquire implements driver.Driver in one transaction: lock the key's header
// row (made if missing), read the live permits, and take the owner's permit
// again or a free one, drawing the token from the header.
func (s *SemaphoreDriver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if s == nil {
		return driver.Grant{}, errNilDriver
	}
	d := s.d
	conn, m, used := d.wakeable(ctx)
	defer used()
	var token int64
	var taken *driver.Taken
	err := d.do(ctx, "acquire", func(ctx context.Context) error {
		token, taken = 0, nil
		tx, err := d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		size, base, last, err := s.header(ctx, tx, r.Key)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, `SELECT owner, size, TIMESTAMPDIFF(MICROSECOND, `+now+`, expires_at), token FROM `+d.sem+`
WHERE sem_key = `+lit(r.Key)+` AND owner <> X'' AND expires_at > `+now)
		if err != nil {
			return err
		}
		var live []permit
		var mine int64 // the owner's token, when it holds a permit
		for rows.Next() {
			var p permit
			var tok int64
			if err := rows.Scan(&p.owner, &p.n, &p.us, &tok); err != nil {
				rows.Close()
				return err
			}
			if p.owner == r.Owner {
				mine = tok
			}
			live = append(live, p)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		limit, setBase, err := s.limit(r.Key, size, base, live)
		if err != nil {
			return err
		}
		switch {
		case mine > 0:
			token = mine
		case len(live) < limit:
			token = last + 1
		default:
			rem := time.Duration(-1)
			for _, p := range live {
				if r := time.Duration(p.us) * time.Microsecond; rem < 0 || r < rem {
					rem = r
				}
			}
			taken = busyTaken(rem, m, r.Waiting && conn != 0)
			if r.Waiting && conn != 0 {
				c := lit(num(conn))
				if _, err := tx.ExecContext(ctx, `UPDATE `+d.sem+` SET waiters = IF(waiters = X'', `+c+`,
	IF(FIND_IN_SET(`+c+`, waiters) > 0 OR LENGTH(waiters) > 900, waiters, CONCAT(waiters, ',', `+c+`)))
WHERE sem_key = `+lit(r.Key)+` AND owner = X''`); err != nil {
					return err
				}
			}
			return tx.Commit()
		}
		// The grant: the owner's row, made or replaced (an expired permit
		// of the owner's), and the header's newest token.
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+d.sem+` (sem_key, owner, token, expires_at, metadata, size, holder_conn)
VALUES (`+lit(r.Key)+`, `+lit(r.Owner)+`, `+num(token)+`, `+now+` + INTERVAL `+num(micros(r.TTL))+` MICROSECOND, `+lit(r.Metadata)+`, `+num(int64(s.n))+`, `+num(conn)+`)
ON DUPLICATE KEY UPDATE token = `+num(token)+`, expires_at = `+now+` + INTERVAL `+num(micros(r.TTL))+` MICROSECOND,
	metadata = `+lit(r.Metadata)+`, size = `+num(int64(s.n))+`, holder_conn = `+num(conn)); err != nil {
			return err
		}
		if token > last || setBase {
			if _, err := tx.ExecContext(ctx, `UPDATE `+d.sem+` SET token = GREATEST(token, `+num(token)+`), base = IF(base = 0, `+num(int64(s.n))+`, base)
WHERE sem_key = `+lit(r.Key)+` AND owner = X''`); err != nil {
				return err
			}
		}
		// Expired permits go: their rows would only grow the table.
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+d.sem+` WHERE sem_key = `+lit(r.Key)+` AND owner <> X'' AND expires_at <= `+now); err != nil {
			return err
		}
		return tx.Commit()
	})
	switch {
	case err != nil:
		return driver.Grant{}, err
	case taken != nil:
		return driver.Grant{}, taken
	}
	return driver.Grant{Token: uint64(token), TTL: r.TTL, Lost: d.w.hold(s, r.Key, r.Owner, m)}, nil
}

// limit returns the number of permits of key as s's Clients use it: the
// stored size (when s's n is the size in force, the size before the first
// resize, or StoredSize), else the holders' n. setBase says that s's n
// becomes the size before the first resize of a key resized before it had
// one.
func (s *SemaphoreDriver) limit(key string, size, base int, live []permit) (int, bool, error) {
	if size > 0 {
		switch {
		case s.n == 0 || s.n == size || s.n == base:
			return size, false, nil
		case base == 0:
			return size, true, nil
		}
		return 0, false, &limitError{key: key, n: s.n, stored: size}
	}
	for _, p := range live {
		if p.n != s.n && p.n > 0 {
			if s.n == 0 {
				return p.n, false, nil
			}
			return 0, false, &limitError{key: key, n: s.n, stored: p.n}
		}
	}
	if s.n == 0 {
		return 0, false, &limitError{key: key}
	}
	return s.n, false, nil
}

// Resize implements driver.Resizer in one transaction: under the key's
// header row it stores n as the key's size (and the size before the first
// resize: the holders', or the Driver's own), and wakes the key's waiters,
// which try again. Holders above a lowered size keep their permits until they
// release them or their leases end; no permit is granted meanwhile. n outside
// [1, MaxPermits] is dlock.ErrInvalid.
func (s *SemaphoreDriver) Resize(ctx context.Context, key string, n int) error {
	if s == nil {
		return errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return err
	}
	if err := checkPermits(n); err != nil {
		return err
	}
	var waiters string
	err := s.d.do(ctx, "resize", func(ctx context.Context) error {
		tx, err := s.d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		size, base, _, err := s.header(ctx, tx, key)
		if err != nil {
			return err
		}
		if size == 0 && base == 0 {
			base = s.n
			var held int
			err := tx.QueryRowContext(ctx, `SELECT size FROM `+s.d.sem+` WHERE sem_key = `+lit(key)+` AND owner <> X'' AND expires_at > `+now+` LIMIT 1`).Scan(&held)
			if err == nil && held > 0 {
				base = held
			} else if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT waiters FROM `+s.d.sem+` WHERE sem_key = `+lit(key)+` AND owner = X''`).Scan(&waiters); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+s.d.sem+` SET size = `+num(int64(n))+`, base = `+num(int64(base))+`, waiters = X''
WHERE sem_key = `+lit(key)+` AND owner = X''`); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err == nil {
		s.d.w.wakeKey(key)
		s.d.killAll(ctx, 0, waiters)
	}
	return err
}

// Extend implements driver.Driver, as Driver.Extend, on the owner's permit.
func (s *SemaphoreDriver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if s == nil {
		return 0, errNilDriver
	}
	n, err := s.d.affected(ctx, "extend", `UPDATE `+s.d.sem+` SET expires_at = `+renewed(num(micros(ttl)))+`
WHERE sem_key = `+lit(h.Key)+` AND owner = `+lit(h.Owner)+` AND owner <> X'' AND expires_at > `+now)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, notHeld(h.Key)
	}
	return ttl, nil
}

// TTL implements driver.Driver, as Driver.TTL, of the owner's permit.
func (s *SemaphoreDriver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
	if s == nil {
		return 0, errNilDriver
	}
	var us int64
	found := false
	err := s.d.do(ctx, "ttl", func(ctx context.Context) error {
		err := s.d.db.QueryRowContext(ctx, `SELECT TIMESTAMPDIFF(MICROSECOND, `+now+`, expires_at) FROM `+s.d.sem+`
WHERE sem_key = `+lit(h.Key)+` AND owner = `+lit(h.Owner)+` AND owner <> X'' AND expires_at > `+now).Scan(&us)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, notHeld(h.Key)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Release implements driver.Driver: it deletes the owner's permit and wakes
// the first Driver waiting for the key. An expired permit of the owner is
// deleted too, and reported as dlock.ErrNotHeld.
func (s *SemaphoreDriver) Release(ctx context.Context, h driver.Holding) error {
	if s == nil {
		return errNilDriver
	}
	where := ` WHERE sem_key = ` + lit(h.Key) + ` AND owner = ` + lit(h.Owner) + ` AND owner <> X''`
	n, err := s.d.affected(ctx, "release", `DELETE FROM `+s.d.sem+where+` AND expires_at > `+now)
	if err != nil {
		return err
	}
	if n == 0 {
		_, err := s.d.affected(ctx, "release", `DELETE FROM `+s.d.sem+where)
		if err != nil {
			return err
		}
		return notHeld(h.Key)
	}
	var code int64
	err = s.d.do(ctx, "release", func(ctx context.Context) error {
		res, err := s.d.db.ExecContext(ctx, `UPDATE `+s.d.sem+` SET `+popWaiter+`
WHERE sem_key = `+lit(h.Key)+` AND owner = X'' AND waiters <> X''`)
		if err != nil {
			return err
		}
		code, err = res.LastInsertId()
		return err
	})
	s.d.w.wakeKey(h.Key)
	if err == nil {
		s.d.killAll(ctx, code/2, "")
	}
	return nil
}

// Inspect implements driver.Inspector: Holders is the permits in use, Limit
// the semaphore's size, and Owner, Token, Metadata and TTL describe the
// permit that ends last. LastToken is the key's newest token.
func (s *SemaphoreDriver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if s == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var infos []driver.LockInfo
	err := s.d.doOn(ctx, "inspect", false, func(ctx context.Context) error {
		var err error
		infos, err = s.read(ctx, s.d.db, `sem_key = `+lit(key), "")
		return err
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	if len(infos) == 0 {
		return driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}, nil
	}
	return infos[0], nil
}

// ListPrefix implements driver.Inspector: the semaphores with permits in use
// whose keys start with prefix.
func (s *SemaphoreDriver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	if s == nil {
		return nil, errNilDriver
	}
	var out []driver.LockInfo
	err := s.d.doOn(ctx, "list", false, func(ctx context.Context) error {
		infos, err := s.read(ctx, s.d.db, `LEFT(sem_key, `+num(int64(len(prefix)))+`) = `+lit(prefix), "")
		out = out[:0]
		for _, in := range infos {
			if in.Held {
				out = append(out, in)
			}
		}
		return err
	})
	return out, err
}

// querier is a *sql.DB or a *sql.Tx.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// read returns the LockInfo of the semaphores whose rows match where (with
// suffix appended to the query: FOR UPDATE), in the order of their keys.
func (s *SemaphoreDriver) read(ctx context.Context, q querier, where, suffix string) ([]driver.LockInfo, error) {
	rows, err := q.QueryContext(ctx, `SELECT sem_key, owner, token, metadata, GREATEST(0, TIMESTAMPDIFF(MICROSECOND, `+now+`, expires_at)),
	expires_at > `+now+`, size FROM `+s.d.sem+` WHERE `+where+` ORDER BY sem_key, owner = X'' DESC`+suffix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []driver.LockInfo
	for rows.Next() {
		var key, owner, meta string
		var token, us int64
		var live bool
		var size int
		if err := rows.Scan(&key, &owner, &token, &meta, &us, &live, &size); err != nil {
			return nil, err
		}
		if len(out) == 0 || out[len(out)-1].Key != key {
			out = append(out, driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown})
		}
		in := &out[len(out)-1]
		if owner == "" {
			in.Limit, in.LastToken = size, uint64(token)
			continue
		}
		if !live {
			continue
		}
		in.Held, in.Kind = true, driver.KindSemaphore
		in.Holders++
		if in.Limit == 0 {
			in.Limit = size
		}
		if ttl := time.Duration(us) * time.Microsecond; in.Holders == 1 || ttl > in.TTL {
			in.Owner, in.Token, in.Metadata, in.TTL = owner, uint64(token), meta, ttl
		}
	}
	for i := range out {
		if !out[i].Held {
			out[i].Limit = 0
		}
	}
	return out, rows.Err()
}

// ForceUnlock implements driver.Inspector: it deletes every permit of key in
// use, wakes the holders' Drivers (whose Leases are lost at once) and the
// waiters', and returns what it freed. A semaphore without a permit in use is
// dlock.ErrNotHeld.
func (s *SemaphoreDriver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if s == nil {
		return driver.LockInfo{Key: key}, errNilDriver
	}
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{Key: key}, err
	}
	var info driver.LockInfo
	var conns []int64
	var waiters string
	err := s.d.doOn(ctx, "force unlock", false, func(ctx context.Context) error {
		info, conns, waiters = driver.LockInfo{Key: key, Waiters: driver.WaitersUnknown}, nil, ""
		tx, err := s.d.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		where := `sem_key = ` + lit(key)
		infos, err := s.read(ctx, tx, where, " FOR UPDATE")
		if err != nil || len(infos) == 0 || !infos[0].Held {
			return err
		}
		info = infos[0]
		rows, err := tx.QueryContext(ctx, `SELECT holder_conn, waiters FROM `+s.d.sem+` WHERE `+where)
		if err != nil {
			return err
		}
		for rows.Next() {
			var c int64
			var w string
			if err := rows.Scan(&c, &w); err != nil {
				rows.Close()
				return err
			}
			conns, waiters = append(conns, c), waiters+","+w
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+s.d.sem+` WHERE `+where+` AND owner <> X''`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+s.d.sem+` SET waiters = X'' WHERE `+where+` AND owner = X''`); err != nil {
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return driver.LockInfo{Key: key}, err
	}
	if !info.Held {
		return info, fmt.Errorf("%w: mysqllock: %q is free", driver.ErrNotHeld, key)
	}
	for _, c := range conns {
		s.d.killAll(ctx, c, "")
	}
	s.d.killAll(ctx, 0, waiters)
	return info, nil
}
