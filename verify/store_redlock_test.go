package verify

import (
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// Redlock over Config.Masters independent Redis masters.
func init() {
	registerBackend(&backend{
		name:      "redlock",
		faults:    []string{FaultCrash, FaultForce},
		start:     startRedisFamily,
		locker:    redlockLocker,
		inspector: redlockInspector,
		leftover:  redisLeftover,
		fault:     redisFault, // a crash of one master at a time
		// The force removes the lock master by master.
		forceSpans: true,
	})
}

// redlockLocker returns a Redlock Client over every master of s.Lock.
func redlockLocker(s Spec) (dlock.Locker, func(), error) {
	rdbs, closeAll := redisClients(s)
	nodes := make([]redis.UniversalClient, len(rdbs))
	for i, c := range rdbs {
		nodes[i] = c
	}
	lk, err := redlock.New(nodes)
	return lk, closeAll, err
}

// redlockInspector returns Redlock's Inspector over connections of its own
// straight to every master (not through the proxies).
func redlockInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	var nodes []redis.UniversalClient
	closeAll := func() {
		for _, n := range nodes {
			n.Close()
		}
	}
	for _, sv := range redisOf(st).servers {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: sv.Addr}))
	}
	d, err := redlock.NewDriver(nodes)
	if err != nil {
		closeAll()
		return nil, func() {}, err
	}
	return d, closeAll, nil
}
