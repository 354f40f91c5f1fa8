package verify

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/verifyhooks"
	"github.com/dlock-go/dlock/legacy"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/dlock-go/dlock/zklock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Variants are the deliberately broken lock variants the checkers must catch:
//
//   - rawdel: release deletes the lock key without checking the owner;
//   - repeat: every second token is handed out again (the previous one);
//   - prefix: the plain lock's acquire script of before the token fix, whose
//     next token after a released record is the record's plus one, without the
//     server clock (a failover or crash-restart that lost the last grant hands
//     its token out again);
//   - nodone: the holder is never told that its lease ended (no Done, no
//     deadline) and holds past its TTL;
//   - noexpiry: the lock is written without expiry;
//   - renewafter: the renewal outlives Unlock (the lock stays held after it);
//   - latecleanup: Redlock's clean-up of a failed attempt as it was before
//     its fix, releasing each node by owner alone, and held up in the network
//     until the owner's next attempt took the node again;
//   - lostack: the resource acknowledges one fenced write in three without
//     storing it (a worker's variant: the lock is sound);
//   - rwshared: on the read-write lock with readers, the writers take the
//     read side, which readers and other writers share (a worker's variant);
//   - nosize: on the resized semaphore, the workers ignore the stored size
//     and take permits under the N they were made with.
//   - nodelay: the store is never told of the lock-delay: a holding that
//     ends without a release frees the lock at its expiry.
//   - nopush: the driver's grants carry no Lost: a holder whose lock was
//     force-unlocked learns of it at its next renewal, not at once.
//   - nosubcheck: the Client does not check its holdings when its loss
//     subscription is established (at first, or again after it dropped): a
//     force-unlock that came before is left to the holder's next renewal.
var Variants = []string{"rawdel", "repeat", "prefix", "nodone", "noexpiry", "renewafter", "latecleanup", "lostack", "rwshared", "nosize", "nodelay", "nopush", "nosubcheck"}

// lockVariant reports whether variant breaks the lock's driver (the others
// break the worker's side: its lease's watch, or the resource).
func lockVariant(variant string) bool {
	return variant != "" && variant != "nodone" && variant != "lostack" && variant != "rwshared"
}

// NewLocker returns the Locker a worker of s uses, and the function that closes
// its connections.
func NewLocker(s Spec) (dlock.Locker, func(), error) {
	var rdbs []*redis.Client
	closeAll := func() {
		for _, c := range rdbs {
			c.Close()
		}
	}
	switch s.Backend {
	case "memlock":
		lk, err := memlock.New(s.mem)
		return lk, closeAll, err
	case "etcd":
		cli, err := clientv3.New(clientv3.Config{Endpoints: s.Lock, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, closeAll, err
		}
		lk, err := etcdlock.New(cli)
		return lk, func() { cli.Close() }, err
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(s.Lock[0])
		if err != nil {
			return nil, closeAll, err
		}
		cfg.ConnConfig.ConnectTimeout = time.Second
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, closeAll, err
		}
		opts := []pglock.Option{pglock.WithCreateTable(), pglock.WithRequestTimeout(500 * time.Millisecond)}
		d, err := pglock.NewDriver(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, closeAll, err
		}
		if s.Kind == "sem" {
			sd, err := pglock.NewSemaphoreDriver(pool, s.N, opts...)
			if err != nil {
				pool.Close()
				return nil, closeAll, err
			}
			lk, err := dlock.NewClient(sd)
			return lk, pool.Close, err
		}
		lk, err := pglock.NewClient(d)
		return lk, pool.Close, err
	case "zookeeper":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		d, err := zklock.NewDriver(ctx, s.Lock, zklock.WithSessionTimeout(s.TTL), zklock.WithLogger(func(string, ...any) {}))
		if err != nil {
			return nil, closeAll, err
		}
		lk, err := zklock.NewClient(d)
		return lk, func() { d.Close() }, err
	}
	if len(s.Lock) == 0 {
		return nil, closeAll, fmt.Errorf("%w: verify: no lock store address", dlock.ErrInvalid)
	}
	var (
		rdb *redis.Client         // one server's client (none on a cluster)
		uc  redis.UniversalClient // the client the lock runs on
	)
	switch s.Topology {
	case TopologySentinel:
		rdbs = append(rdbs, redis.NewFailoverClient(failoverOptions(s.Lock)))
	case TopologyCluster:
		cc := redis.NewClusterClient(clusterOptions(s.Lock))
		uc, closeAll = cc, func() { cc.Close() }
	default:
		for _, a := range s.Lock {
			rdbs = append(rdbs, redis.NewClient(redisOptions(a)))
		}
	}
	if len(rdbs) > 0 {
		rdb, uc = rdbs[0], rdbs[0]
	}
	var (
		lk  dlock.Locker
		err error
	)
	switch {
	case s.Variant == "latecleanup" && s.Backend == "redlock":
		lk, err = lateCleanupRedlock(rdbs, s.TTL/2)
	case s.Variant == "shortwait" && s.Backend == "redlock":
		lk, err = shortWaitRedlock(rdbs)
	case s.Variant == "nosubcheck":
		// The plain lock itself, its Client's subscribe-time check
		// switched off in this worker process.
		verifyhooks.NoSubscribeCheck.Store(true)
		lk, err = redislock.New(uc)
	case s.Variant == "nosize" && rdb != nil:
		lk, err = noSizeClient(rdb, s.N)
	case lockVariant(s.Variant) && rdb == nil:
		err = fmt.Errorf("%w: verify: variant %q on a cluster", dlock.ErrInvalid, s.Variant)
	case lockVariant(s.Variant):
		lk, err = brokenClient(rdb, s.Variant)
	case s.Backend == "redlock":
		nodes := make([]redis.UniversalClient, len(rdbs))
		for i, c := range rdbs {
			nodes[i] = c
		}
		lk, err = redlock.New(nodes)
	case s.Backend == "legacy":
		lk, err = legacy.New(uc, legacy.Format{})
	case s.Backend != "redis":
		err = fmt.Errorf("%w: verify: backend %q", dlock.ErrInvalid, s.Backend)
	case s.Kind == "plain":
		lk, err = redislock.New(uc)
	case s.Kind == "fair":
		lk, err = redislock.NewFair(uc)
	case s.Kind == "reentrant":
		lk, err = redislock.NewReentrant(uc)
	case s.Kind == "rw":
		var m *redislock.RWMutex
		m, err = redislock.NewRWMutex(uc)
		if err == nil {
			lk = m // the write side; RunWorker takes its read side from it
		}
	case s.Kind == "sem":
		lk, err = redislock.NewSemaphore(uc, s.N)
	default:
		err = fmt.Errorf("%w: verify: lock kind %q", dlock.ErrInvalid, s.Kind)
	}
	return lk, closeAll, err
}

// brokenClient returns a Client over the plain Redis lock, broken as variant says.
func brokenClient(rdb *redis.Client, variant string) (*dlock.Client, error) {
	inner, err := redislock.NewDriver(rdb)
	if err != nil {
		return nil, err
	}
	return dlock.NewClient(&broken{Driver: inner, rdb: rdb, variant: variant})
}

// broken is a plain Redis lock Driver with one deliberate defect.
type broken struct {
	*redislock.Driver
	rdb     *redis.Client
	variant string
	mu      sync.Mutex
	n       int
	last    map[string]uint64 // repeat: the last token handed out per key
}

var (
	//go:embed testdata/prefix_lib.lua
	prefixLib string
	//go:embed testdata/prefix_acquire.lua
	prefixAcquire string
	// prefixScript is the plain lock's acquire script as it was before tokens
	// took the server clock into account after a released record.
	prefixScript = redis.NewScript(prefixLib + prefixAcquire)
)

// Acquire takes the plain lock, broken as b.variant says.
func (b *broken) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if b.variant == "prefix" {
		return b.prefixAcquire(ctx, r)
	}
	if b.variant == "nodelay" {
		r.Delay = 0
	}
	g, err := b.Driver.Acquire(ctx, r)
	if err != nil {
		return g, err
	}
	switch b.variant {
	case "repeat":
		b.mu.Lock()
		b.n++
		if last, ok := b.last[r.Key]; ok && b.n%2 == 0 {
			g.Token = last // the token of an older state, handed out again
		}
		if b.last == nil {
			b.last = map[string]uint64{}
		}
		b.last[r.Key] = g.Token
		b.mu.Unlock()
	case "nopush":
		g.Lost = nil // the store's word that the holding is gone never reaches the lease
	case "noexpiry":
		if err := b.rdb.Persist(ctx, redislock.LockKey(r.Key)).Err(); err != nil {
			return g, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
		}
	}
	return g, nil
}

// prefixAcquire runs the pre-fix acquire script, not waiting (no waiting set).
func (b *broken) prefixAcquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	keys := []string{redislock.LockKey(r.Key), redislock.FenceKey(r.Key),
		redislock.LockKey(r.Key) + ":gone:" + r.Owner, redislock.LockKey(r.Key) + ":waiting"}
	res, err := prefixScript.Run(ctx, b.rdb, keys, r.Owner, r.TTL.Milliseconds(), "", "", "0", "0", "", "", "0").Slice()
	if err != nil {
		return driver.Grant{}, fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		tok, err := toUint(res[1])
		if err != nil {
			return driver.Grant{}, err
		}
		return driver.Grant{Token: tok, Handle: tok}, nil
	case 0:
		pttl, _ := res[1].(int64)
		return driver.Grant{}, &driver.Taken{Remaining: time.Duration(pttl) * time.Millisecond}
	}
	return driver.Grant{}, fmt.Errorf("%w: verify: acquire reply %v", dlock.ErrRefused, res)
}

func toUint(v any) (uint64, error) {
	switch t := v.(type) {
	case int64:
		return uint64(t), nil
	case string:
		return strconv.ParseUint(t, 10, 64)
	}
	return 0, fmt.Errorf("%w: verify: token %v", dlock.ErrRefused, v)
}

// Extend extends the holding (noexpiry: nothing to extend).
func (b *broken) Extend(ctx context.Context, h driver.Holding, ttl time.Duration) (time.Duration, error) {
	if b.variant == "noexpiry" {
		return ttl, nil // nothing expires: nothing to extend
	}
	return b.Driver.Extend(ctx, h, ttl)
}

// Release releases the holding, broken as b.variant says.
func (b *broken) Release(ctx context.Context, h driver.Holding) error {
	switch b.variant {
	case "rawdel":
		return b.rdb.Del(ctx, redislock.LockKey(h.Key)).Err()
	case "renewafter":
		// Unlock returns at once, and a renewal goes on holding the lock
		// for as long as the process lives.
		go func() {
			for {
				time.Sleep(h.TTL / 3)
				_, _ = b.Driver.Extend(context.Background(), h, h.TTL)
			}
		}()
		return nil
	}
	return b.Driver.Release(ctx, h)
}
