// Package legacy lets Go services take part in the SETNX/GETSET timestamp lock
// that older Java, PHP and C++ services already use, and move a fleet off it.
//
// # The protocol
//
// The recipes this package speaks (Jedis and Spring RedisTemplate in Java,
// Predis with one Lua script in PHP, hiredis-style C++) lock a resource with a
// plain string key, such as "lock.foo" or "foo_lock", whose value is the time the
// lock runs out: a Unix timestamp in milliseconds or in seconds, plus one unit.
// A client takes the lock with SETNX; when the key exists it reads the stamp with
// GET and, if the stamp is in the past, takes the lock over with GETSET and keeps
// it only if GETSET returned the stamp it read. Unlock is a plain DEL.
//
// New returns a dlock Locker that shares such a lock with those clients: it
// reads and writes the same key with the same stamp format (Format), so the old
// clients see it held while a dlock lease holds it and dlock sees their holdings.
// What it does differently:
//
//   - Acquire, takeover and release are each one Lua script, so two takeovers
//     cannot interleave, a losing attempt writes nothing, and Unlock and Extend act
//     only while the key still holds the stamp this lease wrote and that stamp has
//     not run out (the recipes' DEL deletes whatever is there).
//   - The stamp carries no owner, so dlock keeps the owner, the stamp it wrote
//     and the fencing counter in a companion hash in the same Redis Cluster slot
//     (CompanionKey). A lease owns the lock while the companion names its owner
//     and the key holds exactly the stamp it wrote, not yet run out: the owner
//     tells dlock holdings apart, the stamp tells them from an old client's
//     takeover, which always writes a stamp above the run-out one it replaces.
//     An old client can write a stamp equal to a live dlock stamp only after the
//     key was deleted under it (the recipes' unchecked DEL) or with a skewed
//     clock, that is once exclusion is already broken, or as the loser of a
//     GETSET race in the same millisecond with the same timeout, and then nobody
//     else holds the lock and the stamp is the one the lease asked for. Stamps
//     therefore carry nothing to make them unique; random extra units would only
//     make locks last longer.
//   - Fencing tokens come from the companion hash (max(last+1, server time in
//     µs), as in redislock). They order the holdings of dlock lockers, so a
//     resource that checks them rejects a stale dlock holder. Legacy clients do
//     not draw tokens, so a resource fenced with them cannot tell a legacy holder
//     from nobody: fencing protects against paused dlock holders only.
//   - Format.Expire adds a real key expiry (SET PX) as a safety net, so that a
//     lock key left by a crashed process disappears even if no client ever looks
//     at its stamp again.
//
// What it cannot fix, because the old clients are part of the lock: a client
// whose clock runs ahead takes live locks; the old clients' takeover race moves
// the winner's stamp; their unlock deletes a successor's lock after they overran
// their own. docs/migrating-from-setnx.md in the repository shows each fault and
// the way off the protocol: NewBridge, then package redislock.
//
// # Time
//
// A stamp holds the lock until the current time in its unit has passed it: with
// stamp S and unit u, the lock is free from the instant (S+1)×u on. That is the
// strictest reading among the recipes (the Java and C++ code; the PHP script
// frees it one unit earlier), so dlock never takes over a lock that any of them
// still counts as held. dlock writes floor((now+ttl)/u)+1, the recipes' "+1", so
// every recipe sees the lock held for at least the lease's TTL. With seconds,
// the lock is held up to two seconds longer than the TTL; the lease's local
// deadline stays at the TTL, so the holder gives up first. Lease.TTL and the
// time a waiter sleeps count to the stamp less its extra unit while that lies
// ahead, then to the stamp's end, or to the key's real expiry (PTTL) when that
// comes first: the PHP recipe's takeover writes a stamp seconds beyond the
// EXPIRE it sets, and a waiter sleeping to that stamp would wake long after the
// key has gone and an old client has taken it.
//
// The clock is the local one by default (Format.Clock), as the old clients use;
// every client's clock must agree with the others' to well within the TTL.
// Format.ServerClock makes dlock's stamps use the Redis server clock instead,
// which keeps dlock lockers consistent with each other whatever their hosts'
// clocks say, but not with old clients on skewed hosts.
package legacy

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/redisscript"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed ttl.lua
	ttlSrc string

	acquireScript = redis.NewScript(libSrc + acquireSrc)
	extendScript  = redis.NewScript(libSrc + extendSrc)
	releaseScript = redis.NewScript(libSrc + releaseSrc)
	ttlScript     = redis.NewScript(libSrc + ttlSrc)
)

// FenceRetention is how long the companion hash (and with it the fencing counter)
// outlives the last acquisition or extension of its lock. Tokens stay increasing
// after it is gone because they never fall below the server clock in µs.
const FenceRetention = 24 * time.Hour

// Stamp bounds: a value outside them is not a timestamp in the Format's unit
// (a seconds stamp read as milliseconds would be from 1973, a milliseconds stamp
// read as seconds from the year 5138), so it is reported as dlock.ErrConflict
// instead of being taken over or waited on.
const (
	minMillis  = 100_000_000_000     // 1973-03-03 in ms
	maxStamp   = 999_999_999_999_999 // 15 digits: exact in a Lua number
	maxSeconds = minMillis - 1
)

// Format describes the lock key and value format the fleet's clients use. The
// zero Format is the Java recipes': the key as given, stamps in milliseconds,
// no real expiry, the local clock.
type Format struct {
	// Key maps a dlock key to the Redis key the fleet locks, for example
	// Prefix("lock.") for "lock.foo" or Suffix("_lock") for "foo_lock". nil uses
	// the key as it is.
	Key func(key string) string

	// Unit is the unit of the stamps: time.Millisecond (the default when zero) or
	// time.Second. Any other value is dlock.ErrInvalid.
	Unit time.Duration

	// Expire also gives every key dlock writes a real expiry (PEXPIRE), one unit
	// after its stamp runs out, as a safety net: a key left by a crashed holder
	// then disappears on its own. Old clients do not need it and GETSET clears it.
	// The default is false, as in the Java recipes.
	Expire bool

	// Clock is the clock stamps are computed from. nil means time.Now, the local
	// clock, as the fleet's clients do.
	Clock func() time.Time

	// ServerClock computes stamps from the Redis server clock (TIME) instead of a
	// local one. It cannot be combined with Clock.
	ServerClock bool
}

// Prefix returns a Format.Key function that puts p before the key ("lock." + key).
func Prefix(p string) func(string) string { return func(k string) string { return p + k } }

// Suffix returns a Format.Key function that puts s after the key (key + "_lock").
func Suffix(s string) func(string) string { return func(k string) string { return k + s } }

// Client is the dlock.Client New returns: a dlock.Locker that speaks the legacy
// protocol, and a dlock.Inspector through its Driver. Its driver, for the key
// names and counters, is Client.Driver().(*Driver).
type Client = dlock.Client

// New returns a Client locking through rdb in format f, with opts as the defaults
// of every TryLock and Lock. It returns an error matching dlock.ErrInvalid for a
// nil client, a bad Format or a bad option; it does no I/O.
func New(rdb redis.UniversalClient, f Format, opts ...dlock.Option) (*dlock.Client, error) {
	d, err := NewDriver(rdb, f)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(d, opts...)
}

// Driver is the dlock.Driver of the legacy protocol: one Lua script round trip
// per operation. Most users want New instead.
type Driver struct {
	rdb     redis.UniversalClient
	f       Format
	unit    string // ms per unit
	lo, hi  string // stamp bounds
	foreign atomic.Uint64
	loaded  atomic.Bool
}

// NewDriver returns the legacy-protocol driver over rdb in format f.
func NewDriver(rdb redis.UniversalClient, f Format) (*Driver, error) {
	if dlock.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", dlock.ErrInvalid)
	}
	d := &Driver{rdb: rdb, f: f}
	switch f.Unit {
	case 0, time.Millisecond:
		d.f.Unit = time.Millisecond
		d.unit, d.lo, d.hi = "1", strconv.Itoa(minMillis), strconv.Itoa(maxStamp)
	case time.Second:
		d.unit, d.lo, d.hi = "1000", "0", strconv.Itoa(maxSeconds)
	default:
		return nil, fmt.Errorf("%w: legacy stamp unit %v (want 1ms or 1s)", dlock.ErrInvalid, f.Unit)
	}
	if f.ServerClock && f.Clock != nil {
		return nil, fmt.Errorf("%w: legacy Format with both Clock and ServerClock", dlock.ErrInvalid)
	}
	if d.f.Key == nil {
		d.f.Key = func(k string) string { return k }
	}
	return d, nil
}

// LockKey returns the Redis key the fleet locks for key, or an error matching
// dlock.ErrInvalid when Format.Key maps it to a name dlock cannot use.
func (d *Driver) LockKey(key string) (string, error) {
	k := d.f.Key(key)
	if k == "" || len(k) > 2*dlock.MaxKeyLen {
		return "", fmt.Errorf("%w: legacy key name of %d bytes for %q", dlock.ErrInvalid, len(k), key)
	}
	return k, nil
}

// CompanionKey returns the hash where dlock keeps the owner, the stamp it wrote,
// the fencing counter and the metadata of the legacy lock key lockKey. It lies in the
// same Redis Cluster slot: "{lockKey}:dlock", or "{tag}:dlock:lockKey" when
// lockKey has a hash tag of its own. A lock key with a '}' outside a hash tag
// cannot share a slot this way and is dlock.ErrInvalid.
func CompanionKey(lockKey string) (string, error) {
	if tag, ok := redisscript.HashTag(lockKey); ok {
		return "{" + tag + "}:dlock:" + lockKey, nil
	}
	if strings.ContainsRune(lockKey, '}') {
		return "", fmt.Errorf("%w: legacy key %q has a '}' outside a hash tag", dlock.ErrInvalid, lockKey)
	}
	return "{" + lockKey + "}:dlock", nil
}

// ForeignHolds counts the acquisition attempts that found the lock held by a
// client other than a dlock locker (an old client of the fleet). During a
// migration it shows that old clients are still taking the lock; it cannot show
// that none are, since it only sees the ones an attempt runs into.
func (d *Driver) ForeignHolds() uint64 { return d.foreign.Load() }

func (d *Driver) keys(key string) ([]string, error) {
	k, err := d.LockKey(key)
	if err != nil {
		return nil, err
	}
	c, err := CompanionKey(k)
	if err != nil {
		return nil, err
	}
	return []string{k, c}, nil
}

// load loads the acquire script on first use, so that the first stamp is not
// computed before a script is sent twice (EVALSHA, then EVAL on NOSCRIPT): the
// stamp counts from the time it is computed, and that should be as close as it
// can to the time the script runs. The other scripts are loaded by their first
// run.
func (d *Driver) load(ctx context.Context) error {
	if d.loaded.Load() {
		return nil
	}
	if err := acquireScript.Load(ctx, d.rdb).Err(); err != nil {
		return mapErr(err)
	}
	d.loaded.Store(true)
	return nil
}

// args returns the arguments lib.lua reads, ARGV[1] to ARGV[5].
func (d *Driver) args(owner string, more ...any) []any {
	now := ""
	if !d.f.ServerClock {
		clock := time.Now
		if d.f.Clock != nil {
			clock = d.f.Clock
		}
		now = strconv.FormatInt(clock().UnixMilli(), 10)
	}
	return append([]any{d.unit, now, d.lo, d.hi, owner}, more...)
}

func (d *Driver) expire() string {
	if d.f.Expire {
		return "1"
	}
	return "0"
}

var retentionMS = strconv.FormatInt(FenceRetention.Milliseconds(), 10)

// Acquire implements dlock.Driver.
func (d *Driver) Acquire(ctx context.Context, r dlock.AcquireRequest) (dlock.Grant, error) {
	keys, err := d.keys(r.Key)
	if err != nil {
		return dlock.Grant{}, err
	}
	if err := d.load(ctx); err != nil {
		return dlock.Grant{}, err
	}
	res, err := acquireScript.Run(ctx, d.rdb, keys,
		d.args(r.Owner, r.TTL.Milliseconds(), d.expire(), retentionMS, r.Metadata, r.Key)...).Slice()
	if err != nil {
		return dlock.Grant{}, mapErr(err)
	}
	if len(res) != 3 {
		return dlock.Grant{}, fmt.Errorf("%w: legacy: unexpected acquire reply %v", dlock.ErrRefused, res)
	}
	ok, _ := res[0].(int64)
	v, _ := res[1].(int64)
	if ok != 1 {
		if f, _ := res[2].(int64); f == 1 {
			d.foreign.Add(1)
		}
		return dlock.Grant{}, &dlock.BusyError{Remaining: time.Duration(v) * time.Millisecond}
	}
	if v <= 0 {
		return dlock.Grant{}, fmt.Errorf("%w: legacy: invalid fencing token %d", dlock.ErrRefused, v)
	}
	return dlock.Grant{Token: uint64(v), TTL: r.TTL}, nil
}

// Extend implements dlock.Driver.
func (d *Driver) Extend(ctx context.Context, h dlock.Holding, ttl time.Duration) (time.Duration, error) {
	keys, err := d.keys(h.Key)
	if err != nil {
		return 0, err
	}
	n, err := extendScript.Run(ctx, d.rdb, keys, d.args(h.Owner, ttl.Milliseconds(), d.expire(), retentionMS)...).Int64()
	return ttl, heldReply(h.Key, n == 1, err)
}

// Release implements dlock.Driver.
func (d *Driver) Release(ctx context.Context, h dlock.Holding) error {
	keys, err := d.keys(h.Key)
	if err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, d.rdb, keys, d.args(h.Owner)...).Int64()
	return heldReply(h.Key, n == 1, err)
}

// TTL implements dlock.Driver.
func (d *Driver) TTL(ctx context.Context, h dlock.Holding) (time.Duration, error) {
	key, owner := h.Key, h.Owner
	keys, err := d.keys(key)
	if err != nil {
		return 0, err
	}
	n, err := ttlScript.Run(ctx, d.rdb, keys, d.args(owner)...).Int64()
	if err := heldReply(key, n >= 0, err); err != nil {
		return 0, err
	}
	return time.Duration(n) * time.Millisecond, nil
}

func heldReply(key string, held bool, err error) error {
	if err != nil {
		return mapErr(err)
	}
	if !held {
		return fmt.Errorf("%w: legacy lock %q does not hold this owner's stamp", dlock.ErrNotHeld, key)
	}
	return nil
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("legacy", err) }
