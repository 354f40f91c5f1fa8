package dlock

import (
	"log/slog"
	"math"
	"time"

	"github.com/dlock-go/dlock/driver"
)

// Defaults. A Client built without options uses these values.
const (
	// DefaultFailureLimit is how long a waiting acquisition keeps retrying a
	// backend that only fails (no reply saying the lock is held) when
	// WithFailureLimit is not given.
	DefaultFailureLimit = time.Minute
)

// Option configures a Client (as its default for every call) or a single TryLock or
// Lock call (overriding the Client's defaults for that call).
type Option func(*config)

type config struct {
	ttl        time.Duration
	ttlSet     bool
	autoRenew  int8 // -1 off, 0 unset (auto), 1 on
	waitSet    bool // beside the other small fields: config stays in a smaller size class
	renewEvery time.Duration
	maxHold    time.Duration
	wait       time.Duration
	retry      RetryStrategy
	failLimit  time.Duration
	logger     *slog.Logger // nil: slog.Default() when a message is logged
	observer   Observer     // nil: no events
	drift      float64
	metadata   string
	lockDelay  time.Duration
	owner      string // WithOwner's ID; empty for anonymous acquisitions
	err        error
}

func defaultConfig() config {
	return config{
		ttl:       DefaultTTL,
		retry:     defaultRetry,
		failLimit: DefaultFailureLimit,
		drift:     defaultDriftFactor,
	}
}

// WithTTL sets the lease time: how long the lock lives on the server after its last
// acquisition or renewal. A lease with an explicit TTL is not renewed automatically
// unless WithAutoRenew(true) is given too (a fixed lease time); Campaign is the
// exception: a leadership is renewed whatever its TTL. The TTL must lie in [MinTTL, MaxTTL]; fractions of a millisecond are
// rounded up. The default is DefaultTTL (15s), renewed automatically.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) { c.ttl, c.ttlSet = ttl, true }
}

// WithAutoRenew turns the watchdog on or off. When on, the lease is extended by its
// TTL every renewal interval (WithRenewEvery) until Unlock, until the MaxHold cap, or
// until a renewal is refused. Transient renewal errors are retried within the
// remaining validity. The default is on when no TTL is given and off otherwise.
func WithAutoRenew(on bool) Option {
	return func(c *config) {
		c.autoRenew = -1
		if on {
			c.autoRenew = 1
		}
	}
}

// WithRenewEvery sets how often the watchdog extends the lease. It must be positive
// and shorter than the TTL. The default is a third of the TTL.
func WithRenewEvery(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.setErr(invalidf("renewal interval %v must be positive", d))
			return
		}
		c.renewEvery = d
	}
}

// WithMaxHold caps the total time the watchdog keeps a lease alive: the renewals
// that come within a TTL of the cap ask only for the time left to it (rounded
// down to the store's TTL step), then renewal stops, so that the lease ends, firing
// Done, no later than d after its acquisition began (or at the TTL of the
// acquisition, if the cap comes before the first renewal). It protects the fleet
// from a holder stuck in a loop. The default is no cap.
func WithMaxHold(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.setErr(invalidf("max hold %v must be positive", d))
			return
		}
		c.maxHold = d
	}
}

// WithWait bounds how long Lock waits for a held lock to become free, retrying
// meanwhile the failures that waiting may cure (ErrUnavailable), for at most the
// failure limit (WithFailureLimit) in a row. Zero makes Lock a
// TryLock: one attempt, no waiting and no retry. Negative values are invalid. The
// default is to wait until the lock is obtained or the context ends. TryLock
// ignores it.
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.setErr(invalidf("wait %v is negative", d))
			return
		}
		c.wait, c.waitSet = d, true
	}
}

// WithFailureLimit bounds how long a waiting acquisition (Lock, Do, LockAll,
// Campaign...) retries a backend that only fails: when every attempt for d has
// met a failure that waiting may cure (ErrUnavailable: the server is down,
// unreachable, out of memory, read-only, loading...) and none has met the lock
// held by another owner, the wait gives up with the last failure, whose error
// matches ErrUnavailable (not ErrNotObtained, nor a context error) and names
// the server's reason. An attempt that finds the lock held starts the count
// again: a store that answers is waited on for as long as the wait lasts. The
// attempt in flight when d passes is not cut short: the wait ends at its reply
// or its request timeout. The first failure of a wait is logged once, with
// slog.Default (or WithLogger's logger), saying what it met and that the wait
// goes on within this bound. The limit applies whatever the context's deadline and WithWait, the
// earlier end winning; to ride out longer outages (a server restart that takes
// minutes) give a longer limit. d must be positive. The default is
// DefaultFailureLimit (1 minute). TryLock ignores it.
func WithFailureLimit(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.setErr(invalidf("failure limit %v must be positive", d))
			return
		}
		c.failLimit = d
	}
}

// WithLogger sets the logger of the messages a wait or RunAsLeader writes (the
// first failure of a wait, a failed campaign, a lost leadership), for example a
// program's own handler, or slog.New(slog.DiscardHandler) for none. l must not
// be nil. The default is slog.Default() at the time of the message.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.setErr(invalidf("nil logger"))
			return
		}
		c.logger = l
	}
}

// log returns the logger of the configuration.
func (c *config) log() *slog.Logger {
	if c.logger != nil {
		return c.logger
	}
	return slog.Default()
}

// WithRetry sets the backoff between attempts while Lock waits. With a backend
// that notifies waiters (every backend but a polling fall-back), a waiter sleeps until it is woken or the holder's
// remaining TTL has passed; the strategy then only limits the attempts, and sets
// the sleep when the remaining TTL is unknown or no subscription could be made.
// The default is ExponentialBackoff(8ms, 512ms) with full jitter.
func WithRetry(s RetryStrategy) Option {
	return func(c *config) {
		if err := ValidateRetry(s); err != nil {
			c.setErr(err)
			return
		}
		c.retry = s
	}
}

// WithDriftFactor sets the share of the TTL that the local validity deadline keeps
// in reserve for clock drift; 2ms are always added. It must lie in [0, 0.5).
// The default is 0.01.
func WithDriftFactor(f float64) Option {
	return func(c *config) {
		if math.IsNaN(f) || f < 0 || f >= 0.5 {
			c.setErr(invalidf("drift factor %v outside [0, 0.5)", f))
			return
		}
		c.drift = f
	}
}

// WithMetadata attaches a free-form description to the lock while it is held (for
// example host, process and purpose), shown by inspection tools. At most
// driver.MaxMetadataLen bytes. The default is none.
func WithMetadata(s string) Option {
	return func(c *config) {
		if len(s) > driver.MaxMetadataLen {
			c.setErr(invalidf("metadata of %d bytes exceeds %d", len(s), driver.MaxMetadataLen))
			return
		}
		c.metadata = s
	}
}

// WithLockDelay gives the lock a lock-delay of d (as Chubby and Consul do):
// when a holding ends without an Unlock (its holder crashed or stopped
// renewing, its lease ran out or was lost, it was force-unlocked), the store
// refuses the lock to everybody for d after that end, so that a resource that
// cannot check fencing tokens is protected from a holder that still runs. An
// Unlock ends the holding at once, without a delay. TryLock meets a lock in
// its delay as held (a *BusyError); Lock waits through it. The delay is the
// holder's: it is kept with the holding by the store and counted by the
// store's clock (docs/safety.md says how, per backend). d must lie in
// [0, driver.MaxLockDelay]; a positive d with a backend that cannot keep it
// is refused with an error matching errors.ErrUnsupported. The default is 0,
// no delay.
func WithLockDelay(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > driver.MaxLockDelay {
			c.setErr(invalidf("lock-delay %v outside [0, %v]", d, driver.MaxLockDelay))
			return
		}
		c.lockDelay = d
	}
}

// Combine returns an Option that applies opts in order, for bundling a policy
// (for example a TTL with its renewal settings) into one value.
func Combine(opts ...Option) Option {
	return func(c *config) { c.apply(opts) }
}

func (c *config) setErr(err error) {
	if c.err == nil {
		c.err = err
	}
}

func (c *config) apply(opts []Option) {
	for _, o := range opts {
		if o == nil {
			c.setErr(invalidf("nil option"))
			continue
		}
		o(c)
	}
}

// renewing reports whether the watchdog runs for this configuration.
func (c *config) renewing() bool {
	switch c.autoRenew {
	case 1:
		return true
	case -1:
		return false
	}
	return !c.ttlSet
}

// check validates the combined configuration and normalises the TTL.
func (c *config) check(lim driver.TTLLimits) error {
	if c.err != nil {
		return c.err
	}
	ttl, err := lim.Normalize(c.ttl)
	if err != nil {
		return err
	}
	c.ttl = ttl
	if err := checkValidity(ttl, c.drift); err != nil {
		return err
	}
	if c.renewing() {
		if c.renewEvery == 0 {
			c.renewEvery = ttl / 3
		}
		if c.renewEvery >= ttl-driftMargin(ttl, c.drift) {
			return invalidf("renewal interval %v not shorter than ttl %v minus drift margin", c.renewEvery, ttl)
		}
	}
	return nil
}
