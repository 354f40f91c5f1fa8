package main

import (
	"context"
	"errors"
	"time"

	"github.com/dlock-go/dlock/driver"

	bsm "github.com/bsm/redislock"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// errNotObtained is what every adapter returns when its library gave up waiting.
var errNotObtained = errors.New("bench: lock not obtained")

// Scenario bits: which scenarios a variant takes part in.
const (
	inA  = 1 << iota
	inB  // b, bc and bp
	inBC // bc only
	inC
	inP
)

// peerTTL is the lease time given to the libraries that have no default (bsm and
// the raw baseline). redsync keeps its own default (8s), dlock its own (15s, renewed).
const peerTTL = 10 * time.Second

// fixedRetry is the short polling interval the peers are also measured with.
const fixedRetry = time.Millisecond

// variant is one locker configuration measured by the bench: a library with its
// retry setting.
type variant struct {
	name string // column name
	lib  string // library, for grouping: raw, dlock, redsync, bsm
	peer bool   // a third-party library (counts for "best peer")
	// retry1ms marks a peer polling every fixedRetry instead of its default retry.
	retry1ms bool
	in       int // scenarios it runs in
	// clientEach gives every goroutine of scenario a a locker of its own (as
	// scenario bc does), where one would share it otherwise.
	clientEach bool
	on         string // the server it locks on: onRedis, onEtcd, onZK, onPG, onNATS or onMySQL
	desc       string // configuration, printed in the header
	open       func(o opening) (locker, error)
	// prim opens a lock kind of scenario p beyond the mutex (open is used
	// there for the others).
	prim func(rdb *redis.Client) (holders, error)
}

// opening is what a variant opens its locker on.
type opening struct {
	e   *env          // the run's servers; nil in a worker process of scenario bp
	rdb *redis.Client // the measured go-redis client
	cnt *cmdCounter   // its counter; lockers on etcd or ZooKeeper add their requests to its lock count
}

// variants is the registry of everything the bench measures, in table order.
var variants = append([]variant{
	{name: "raw", lib: "raw", in: inA | inB,
		desc: "go-redis SET NX PX 10s + compare-and-delete script; waits by polling every 1ms",
		open: func(o opening) (locker, error) { return rawLocker{o.rdb}, nil }},
	{name: "dlock", lib: "dlock", in: inA | inB | inC | inP,
		desc: "redislock.New(rdb), all defaults (15s TTL renewed by the watchdog)",
		open: func(o opening) (locker, error) { return openDlock(redislock.New(o.rdb)) }},
	{name: "dlock/ttl", lib: "dlock", in: inA,
		desc: "redislock.New(rdb, dlock.WithTTL(10s)): fixed lease, no watchdog",
		open: func(o opening) (locker, error) {
			return openDlock(redislock.New(o.rdb, dlock.WithTTL(peerTTL)))
		}},
	{name: "dlock/fair", lib: "dlock", in: inA | inB | inC | inP,
		desc: "redislock.NewFair(rdb), all defaults: FIFO queue in Redis, the release hands the lock to the head",
		open: func(o opening) (locker, error) { return openDlock(redislock.NewFair(o.rdb)) }},
	{name: "redsync", lib: "redsync", peer: true, in: inA | inB | inC,
		desc: "redsync v4 goredis/v9 pool, defaults (8s expiry, retry delay rand 50-250ms); tries unbounded so only the wait ends it",
		open: func(o opening) (locker, error) { return newRedsync(o.rdb), nil }},
	{name: "redsync/1ms", lib: "redsync", peer: true, retry1ms: true, in: inB,
		desc: "redsync as above with WithRetryDelay(1ms)",
		open: func(o opening) (locker, error) {
			return newRedsync(o.rdb, redsync.WithRetryDelay(fixedRetry)), nil
		}},
	{name: "bsm", lib: "bsm", peer: true, in: inA | inB | inC,
		desc: "bsm/redislock, TTL 10s, LinearBackoff(100ms) (its README's retry example; its default is no retry)",
		open: func(o opening) (locker, error) { return bsmLocker{bsm.New(o.rdb), 100 * time.Millisecond}, nil }},
	{name: "bsm/1ms", lib: "bsm", peer: true, retry1ms: true, in: inB,
		desc: "bsm/redislock, TTL 10s, LinearBackoff(1ms)",
		open: func(o opening) (locker, error) { return bsmLocker{bsm.New(o.rdb), fixedRetry}, nil }},
	rueidisVariant,
	dlockRueidisVariant,
	{name: "etcd", lib: "etcd", in: inA | inBC, on: onEtcd,
		desc: "etcdlock.New(cli), all defaults (15s lease renewed by the watchdog), over a clientv3 client of its own; a single-member etcd",
		open: openEtcd},
	etcdMutexVariant,
	{name: "zk", lib: "zk", in: inA | inBC, on: onZK,
		desc: "zklock.NewClient(drv), all defaults (15s TTL renewed by the watchdog), over a zklock.Driver (one session) of its own; a standalone ZooKeeper",
		open: openZK},
	zkRecipeVariant,
	{name: "pg", lib: "pg", in: inA | inBC, on: onPG, clientEach: true,
		desc: "pglock (NewDriver with CreateTable, all defaults: 15s TTL renewed by the watchdog, LISTEN/NOTIFY wake-ups), over a pgxpool of its own per locker (per goroutine in scenario a); a local PostgreSQL",
		open: openPG},
	{name: "pg/unlogged", lib: "pg", in: inA | inBC, on: onPG, clientEach: true,
		desc: "pglock as pg, with Config.Unlogged: an UNLOGGED table (no WAL for the locks' rows; a crash of the server frees every lock)",
		open: openPGUnlogged},
	pgAdvisoryVariant,
	{name: "nats", lib: "nats", in: inA | inBC, on: onNATS, clientEach: true,
		desc: "natslock (NewDriver, all defaults: 15s TTL renewed by the watchdog, a watch per key for wake-ups), over a NATS connection of its own per locker; one NATS server with sync_interval always",
		open: openNATS},
	{name: "nats/fair", lib: "nats", in: inA | inBC, on: onNATS, clientEach: true,
		desc: "natslock.NewFairDriver, all defaults (15s TTL renewed by the watchdog, a queue of entries per key in the bucket, a watch of the queue per key), over a NATS connection of its own per locker; the same server",
		open: openNATSFair},
	natsRecipeVariant,
}, append(mysqlVariants, primitiveVariants...)...)

// locker is one library opened on a go-redis client, or on a connection to etcd
// or ZooKeeper; it may be an io.Closer (see closeLocker).
type locker interface {
	// mutex returns a handle on key for one goroutine's sequential use.
	mutex(key string) mutex
	// notified reports whether waiters are woken by the server rather than polling.
	notified() bool
}

// mutex is a per-goroutine lock handle. lock waits until the lock is held or ctx
// ends (then it returns an error; errNotObtained when the library gave up).
type mutex interface {
	lock(ctx context.Context) error
	unlock(ctx context.Context) error
}

// --- dlock ---

// dlockClient is a dlock Client of any backend (redislock, etcdlock and zklock
// Clients embed one).
type dlockClient interface {
	Lock(ctx context.Context, key string, opts ...dlock.Option) (*dlock.Lease, error)
	Driver() driver.Driver
}

// dlockLocker is a dlock Client, with what closes the connection it was opened on
// when the variant made one of its own.
type dlockLocker struct {
	c     dlockClient
	close func() error
}

func openDlock(c dlockClient, err error) (locker, error) {
	if err != nil {
		return nil, err
	}
	return dlockLocker{c: c}, nil
}

func (d dlockLocker) mutex(key string) mutex { return &dlockMutex{c: d.c, key: key} }

// Close implements io.Closer.
func (d dlockLocker) Close() error {
	if d.close == nil {
		return nil
	}
	return d.close()
}

func (d dlockLocker) notified() bool {
	_, ok := d.c.Driver().(driver.Notifier)
	return ok
}

type dlockMutex struct {
	c     dlockClient
	key   string
	lease *dlock.Lease
}

func (m *dlockMutex) lock(ctx context.Context) error {
	l, err := m.c.Lock(ctx, m.key)
	if err != nil {
		if errors.Is(err, dlock.ErrNotObtained) {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	m.lease = l
	return nil
}

func (m *dlockMutex) unlock(ctx context.Context) error {
	l := m.lease
	m.lease = nil
	return l.Unlock(ctx)
}

// --- redsync ---

type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func newRedsync(rdb *redis.Client, opts ...redsync.Option) redsyncLocker {
	// The default of 32 tries would end some waits before the bench's wait bound;
	// the wait is bounded by the context instead, as for every other library.
	opts = append([]redsync.Option{redsync.WithTries(1 << 30)}, opts...)
	return redsyncLocker{rs: redsync.New(goredis.NewPool(rdb)), opts: opts}
}

func (r redsyncLocker) mutex(key string) mutex {
	return redsyncMutex{r.rs.NewMutex(key, r.opts...)}
}

func (redsyncLocker) notified() bool { return false }

type redsyncMutex struct{ m *redsync.Mutex }

func (m redsyncMutex) lock(ctx context.Context) error {
	err := m.m.LockContext(ctx)
	if errors.Is(err, redsync.ErrFailed) {
		return errors.Join(errNotObtained, err)
	}
	return err
}

func (m redsyncMutex) unlock(ctx context.Context) error {
	ok, err := m.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

// --- bsm/redislock ---

type bsmLocker struct {
	c     *bsm.Client
	retry time.Duration
}

func (b bsmLocker) mutex(key string) mutex { return &bsmMutex{b: b, key: key} }

func (bsmLocker) notified() bool { return false }

type bsmMutex struct {
	b   bsmLocker
	key string
	l   *bsm.Lock
}

func (m *bsmMutex) lock(ctx context.Context) error {
	l, err := m.b.c.Obtain(ctx, m.key, peerTTL, &bsm.Options{RetryStrategy: bsm.LinearBackoff(m.b.retry)})
	if err != nil {
		if errors.Is(err, bsm.ErrNotObtained) || ctx.Err() != nil {
			return errors.Join(errNotObtained, err)
		}
		return err
	}
	m.l = l
	return nil
}

func (m *bsmMutex) unlock(ctx context.Context) error {
	l := m.l
	m.l = nil
	return l.Release(ctx)
}

// --- raw go-redis baseline ---

// rawRelease deletes KEYS[1] if it still holds ARGV[1].
var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)

type rawLocker struct{ rdb *redis.Client }

func (r rawLocker) mutex(key string) mutex { return &rawMutex{rdb: r.rdb, key: key} }

func (rawLocker) notified() bool { return false }

type rawMutex struct {
	rdb   *redis.Client
	key   string
	token string
}

func (m *rawMutex) lock(ctx context.Context) error {
	token := randomToken()
	var p poller
	defer p.stop()
	for {
		ok, err := m.rdb.SetNX(ctx, m.key, token, peerTTL).Result()
		if err != nil {
			if ctx.Err() != nil {
				// The outcome is unknown: take back a lock that may have been set.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				_ = rawRelease.Run(cctx, m.rdb, []string{m.key}, token).Err()
				cancel()
				return errors.Join(errNotObtained, err)
			}
			return err
		}
		if ok {
			m.token = token
			return nil
		}
		if err := p.pause(ctx); err != nil {
			return err
		}
	}
}

func (m *rawMutex) unlock(ctx context.Context) error {
	n, err := rawRelease.Run(ctx, m.rdb, []string{m.key}, m.token).Int64()
	if err == nil && n != 1 {
		err = errors.New("raw: lock not held at release")
	}
	return err
}
