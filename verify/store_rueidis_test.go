package verify

import (
	"fmt"
	"net"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockrueidis"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/rueidis"
)

// The plain and the fair Redis lock over a rueidis client (dlockrueidis): the
// same store as the redis backend's (one server behind a proxy), the same
// inspector (force-unlocks by go-redis, told to the rueidis holders by the
// loss push) and leftover check; only the workers' client differs.
func init() {
	registerBackend(&backend{
		name:      "rueidis",
		faults:    []string{FaultCrash, FaultForce},
		start:     startRedisFamily,
		locker:    rueidisLocker,
		inspector: redisFamilyInspector,
		leftover:  redisLeftover,
		fault:     redisFault,
		// The redis backend's: the store and the scripts are its.
		grace: func(s Spec) time.Duration { return backends["redis"].grace(s) },
	})
	// Not yet the network's faults: rueidis dials a new connection (after a
	// reset) with its Dialer's timeout, not the call's context, and a
	// renewal stuck in that dial past the holding's local deadline delays
	// the holder's Done beyond told-first's bound.
	faults := []string{FaultForce, FaultKill}
	scenarios = append(scenarios,
		scenario{"rueidis-plain", "rueidis", "plain", faults, "", false, 0, "fencing, resource, exclusion, told-first, told-at-once (force-unlocks), linearizable, liveness (the plain lock over rueidis)", false})
}

// rueidisLocker returns the Locker of s's kind (plain or fair) over a rueidis
// client of its own, with the go-redis workers' timeouts.
func rueidisLocker(s Spec) (dlock.Locker, func(), error) {
	if len(s.Lock) == 0 {
		return nil, func() {}, fmt.Errorf("%w: verify: no lock store address", dlock.ErrInvalid)
	}
	// The client connects as it is made: a worker that starts while the
	// server is slow tries again, for a few seconds at most.
	var rc rueidis.Client
	var err error
	for range 20 {
		rc, err = rueidis.NewClient(rueidis.ClientOption{
			InitAddress: s.Lock[:1], DisableCache: true, DisableRetry: true,
			Dialer: net.Dialer{Timeout: 300 * time.Millisecond}, ConnWriteTimeout: 300 * time.Millisecond,
		})
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // a back-off between dials, not a wait for an event
	}
	if err != nil {
		return nil, func() {}, err
	}
	t, err := dlockrueidis.Transport(rc, 0)
	var lk dlock.Locker
	switch {
	case err != nil:
	case s.Kind == "plain":
		lk, err = redislock.NewOver(t)
	case s.Kind == "fair":
		var d *redislock.FairDriver
		if d, err = redislock.NewFairDriverOver(t); err == nil {
			lk, err = dlock.NewClient(d)
		}
	default:
		err = fmt.Errorf("%w: verify: lock kind %q over rueidis", dlock.ErrInvalid, s.Kind)
	}
	return lk, rc.Close, err
}
