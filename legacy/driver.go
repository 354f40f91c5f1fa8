package legacy

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock/driver"

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

	acquireScript = redis.NewScript(libSrc + redisscript.TokenLib + acquireSrc)
	extendScript  = redis.NewScript(libSrc + extendSrc)
	releaseScript = redis.NewScript(libSrc + releaseSrc)
	ttlScript     = redis.NewScript(libSrc + ttlSrc)
)

// FenceRetention is how long the companion hash (and with it the fencing counter)
// outlives the last acquisition or extension of its lock. Tokens stay increasing
// after it is gone because they never fall below the server clock in µs.
const FenceRetention = 24 * time.Hour

// Client is the dlock.Client New returns: a dlock.Locker that speaks the legacy
// protocol, and a driver.Inspector through its Driver. Its driver, for the key
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
	return NewClient(d, opts...)
}

// NewClient returns a Client over d, with opts as the defaults of every
// TryLock and Lock. It returns an error matching dlock.ErrInvalid for a nil
// driver or a bad option; it does no I/O.
func NewClient(d *Driver, opts ...dlock.Option) (*dlock.Client, error) {
	if d == nil {
		return nil, fmt.Errorf("%w: legacy: nil driver", driver.ErrInvalid)
	}
	return dlock.NewClient(d, opts...)
}

// Driver is the driver.Driver of the legacy protocol: one Lua script round trip
// per operation. Most users want New instead.
type Driver struct {
	rdb     redis.UniversalClient
	f       Format
	unit    string // ms per unit
	lo, hi  string // stamp bounds
	foreign atomic.Uint64
	loaded  atomic.Bool
}

// NewDriver returns the legacy-protocol driver over rdb in format f (which
// has no options of its own). NewClient makes a Client over it.
func NewDriver(rdb redis.UniversalClient, f Format) (*Driver, error) {
	if driver.IsNil(rdb) {
		return nil, fmt.Errorf("%w: nil redis client", driver.ErrInvalid)
	}
	d := &Driver{rdb: rdb, f: f}
	switch f.Unit {
	case 0, time.Millisecond:
		d.f.Unit = time.Millisecond
		d.unit, d.lo, d.hi = "1", strconv.Itoa(minMillis), strconv.Itoa(maxStamp)
	case time.Second:
		d.unit, d.lo, d.hi = "1000", "0", strconv.Itoa(maxSeconds)
	default:
		return nil, fmt.Errorf("%w: legacy stamp unit %v (want 1ms or 1s)", driver.ErrInvalid, f.Unit)
	}
	if f.ServerClock && f.Clock != nil {
		return nil, fmt.Errorf("%w: legacy Format with both Clock and ServerClock", driver.ErrInvalid)
	}
	if d.f.Key == nil {
		d.f.Key = func(k string) string { return k }
	}
	return d, nil
}

// ForeignHolds counts the acquisition attempts that found the lock held by a
// client other than a dlock locker (an old client of the fleet). During a
// migration it shows that old clients are still taking the lock; it cannot show
// that none are, since it only sees the ones an attempt runs into.
func (d *Driver) ForeignHolds() uint64 { return d.foreign.Load() }

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

// Acquire implements driver.Driver.
func (d *Driver) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	keys, err := d.keys(r.Key)
	if err != nil {
		return driver.Grant{}, err
	}
	if err := d.load(ctx); err != nil {
		return driver.Grant{}, err
	}
	res, err := acquireScript.Run(ctx, d.rdb, keys,
		d.args(r.Owner, r.TTL.Milliseconds(), d.expire(), retentionMS, r.Metadata, r.Key)...).Slice()
	if err != nil {
		return driver.Grant{}, mapErr(err)
	}
	if len(res) != 3 {
		return driver.Grant{}, fmt.Errorf("%w: legacy: unexpected acquire reply %v", driver.ErrRefused, res)
	}
	ok, _ := res[0].(int64)
	v, _ := res[1].(int64)
	if ok != 1 {
		if f, _ := res[2].(int64); f == 1 {
			d.foreign.Add(1)
		}
		return driver.Grant{}, &driver.Taken{Remaining: time.Duration(v) * time.Millisecond}
	}
	if v <= 0 {
		return driver.Grant{}, fmt.Errorf("%w: legacy: invalid fencing token %d", driver.ErrRefused, v)
	}
	return driver.Grant{Token: uint64(v), TTL: r.TTL}, nil
}

// Info implements driver.Driver: a mutex in the legacy protocol.
func (d *Driver) Info() driver.DriverInfo {
	return driver.DriverInfo{Backend: "legacy", Kind: driver.KindMutex}
}

// Extend implements driver.Driver.
func (d *Driver) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	keys, err := d.keys(h.Key)
	if err != nil {
		return 0, err
	}
	n, err := extendScript.Run(ctx, d.rdb, keys, d.args(h.Owner, ttl.Milliseconds(), d.expire(), retentionMS)...).Int64()
	return ttl, heldReply(h.Key, n == 1, err)
}

// Release implements driver.Driver.
func (d *Driver) Release(ctx context.Context, h driver.Holding) error {
	keys, err := d.keys(h.Key)
	if err != nil {
		return err
	}
	n, err := releaseScript.Run(ctx, d.rdb, keys, d.args(h.Owner)...).Int64()
	return heldReply(h.Key, n == 1, err)
}

// TTL implements driver.Driver.
func (d *Driver) TTL(ctx context.Context, h driver.Holding) (time.Duration, error) {
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
		return fmt.Errorf("%w: legacy lock %q does not hold this owner's stamp", driver.ErrNotHeld, key)
	}
	return nil
}

// mapErr turns a go-redis error into one matching the dlock sentinels.
func mapErr(err error) error { return redisscript.MapErr("legacy", err) }
