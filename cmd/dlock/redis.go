package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// redisStore is a store on one Redis server, Sentinel master or Cluster.
type redisStore struct {
	rdb   redis.UniversalClient
	where string
	c     *redislock.Inspector
	fails *failureLog
}

// openRedis connects to the Redis server at rawURL and checks that it answers.
// A Cluster node is detected and the whole Cluster used.
func openRedis(ctx context.Context, rawURL string, tf *tlsFiles) (store, error) {
	client, opt, where, cluster, err := dialRedis(ctx, rawURL, tf)
	if err != nil {
		return nil, err
	}
	var rdb redis.UniversalClient = client
	if cluster {
		rdb.Close()
		if opt.DB != 0 {
			return nil, usageErrorf("bad Redis URL: Redis Cluster has only database 0")
		}
		rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password,
			TLSConfig: opt.TLSConfig, DialTimeout: opt.DialTimeout, MaxRetries: opt.MaxRetries, DialerRetries: opt.DialerRetries,
			ContextTimeoutEnabled: true, PoolSize: opt.PoolSize,
		})
		where = "Redis Cluster at " + opt.Addr
		if _, err := ping(ctx, rdb); err != nil {
			rdb.Close()
			return nil, pingError(where, rawURL, opt.TLSConfig != nil, err)
		}
	}
	c, err := redislock.NewInspector(rdb)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	fails := &failureLog{hide: []string{rawURL}}
	rdb.AddHook(failureHook{fails})
	return &redisStore{rdb: rdb, where: where, c: c, fails: fails}, nil
}

// dialRedis connects to the Redis server at rawURL and checks that it answers;
// cluster reports a Cluster node. On error nothing stays open.
func dialRedis(ctx context.Context, rawURL string, tf *tlsFiles) (rdb *redis.Client, opt *redis.Options, where string, cluster bool, err error) {
	opt, err = parseRedisURL(rawURL, tf)
	if err != nil {
		return nil, nil, "", false, err
	}
	where = "Redis at " + opt.Addr
	rdb = redis.NewClient(opt)
	cluster, err = ping(ctx, rdb)
	if err != nil {
		rdb.Close()
		return nil, nil, "", false, pingError(where, rawURL, opt.TLSConfig != nil, err)
	}
	return rdb, opt, where, cluster, nil
}

// parseRedisURL checks a Redis URL and returns dlock's client options for it,
// with the TLS files of tf for a rediss:// URL.
func parseRedisURL(rawURL string, tf *tlsFiles) (*redis.Options, error) {
	if !strings.Contains(rawURL, "://") {
		want := "redis://" + rawURL
		if strings.HasPrefix(rawURL, "/") {
			want = "unix://" + rawURL
		}
		return nil, usageErrorf("bad Redis URL %s: not a URL: write %s", maskURL(rawURL), maskURL(want))
	}
	opt, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, usageErrorf("bad Redis URL %s: %s", maskURL(rawURL), urlProblem(err, rawURL))
	}
	if opt.Network != "unix" {
		_, port, err := net.SplitHostPort(opt.Addr)
		if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 {
			return nil, usageErrorf("bad Redis URL: address %q has no valid port", opt.Addr)
		}
	}
	switch {
	case opt.TLSConfig != nil:
		if opt.TLSConfig, err = tf.apply(opt.TLSConfig); err != nil {
			return nil, err
		}
	case tf.set():
		return nil, plainWithTLSFiles(rawURL, "rediss://")
	}
	if opt.DialTimeout == 0 {
		opt.DialTimeout = dialTimeout
	}
	if opt.MaxRetries == 0 {
		opt.MaxRetries = 1
	}
	if opt.DialerRetries == 0 {
		opt.DialerRetries = 2 // go-redis dials 5 times by default
	}
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = 4
	return opt, nil
}

// pingError explains why a server did not answer, without credentials.
func pingError(where, rawURL string, tls bool, err error) error {
	msg := redact(err.Error(), rawURL)
	var rerr redis.Error
	switch {
	case errors.As(err, &rerr):
		return unavailableErrorf("%s refused: %s", where, msg)
	case tls && errors.Is(err, context.DeadlineExceeded):
		return unavailableErrorf("cannot reach %s: no TLS answer within %v (is TLS enabled on the server?)", where, pingTimeout)
	case !tls && speaksTLS(err):
		return unavailableErrorf("cannot reach %s: %s: the server may speak TLS: use rediss://", where, msg)
	}
	return unavailableErrorf("cannot reach %s: %s", where, msg)
}

// ping checks that rdb answers, and reports whether it is a Cluster node.
func ping(ctx context.Context, rdb redis.UniversalClient) (cluster bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	info, err := rdb.Info(ctx, "cluster").Result()
	var rerr redis.Error
	if errors.As(err, &rerr) {
		// INFO refused (an ACL, a proxy): a server that answers PING is usable.
		return false, rdb.Ping(ctx).Err()
	}
	if err != nil {
		return false, err
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

func (s *redisStore) String() string { return s.where }

func (s *redisStore) close() { _ = s.rdb.Close() }

func (s *redisStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	switch kind {
	case readLock:
		rw, err := redislock.NewRWMutex(s.rdb, opts...)
		if err != nil {
			return nil, err
		}
		return rw.RLocker(), nil
	case writeLock:
		return redislock.NewRWMutex(s.rdb, opts...)
	case semaphoreLock:
		return redislock.NewSemaphore(s.rdb, permits, opts...)
	case fairLock:
		return redislock.NewFair(s.rdb, opts...)
	}
	return redislock.New(s.rdb, opts...)
}

func (s *redisStore) inspector() driver.Inspector { return s.c }

func (s *redisStore) failures() *failureLog { return s.fails }

func (s *redisStore) explain(ctx context.Context, key string, err error) error {
	if !errors.Is(err, dlock.ErrConflict) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	info, ierr := s.c.Inspect(ctx, key)
	if msg := lockKindHint(key, info); ierr == nil && msg != "" {
		return &exitError{code: exitDataErr, msg: msg}
	}
	return conflictError(key, foreignData(ierr))
}

// conflictError is the error for a key holding foreign data; what says which
// err, an inspection's error, names it, and returns "" otherwise.
func foreignData(err error) string {
	var fd *redislock.ForeignDataError
	if !errors.As(err, &fd) {
		return ""
	}
	if fd.Type == "hash" {
		return fmt.Sprintf(" (Redis key %q is a hash without a lock owner)", fd.RedisKey)
	}
	return fmt.Sprintf(" (Redis key %q is a %s)", fd.RedisKey, redisTypeName(fd.Type))
}

// lockKindHint says which flags take the lock named key when info, what an
// inspection read, is a dlock lock of a kind the run did not ask for (a
// semaphore of another size too), and "" when nothing holds it.
func lockKindHint(key string, info dlock.LockInfo) string {
	switch {
	case !info.Held:
		return ""
	case info.Kind == driver.KindSemaphore:
		return fmt.Sprintf("key %q is a semaphore of %d permits: take it with -n %d", key, info.Limit, info.Limit)
	case info.Kind == driver.KindReadWrite:
		return fmt.Sprintf("key %q is a read-write lock: take it with -s (shared) or -x (exclusive)", key)
	}
	return fmt.Sprintf("key %q is an exclusive lock: take it without -n, -s and -x", key)
}

// redisTypeName names a Redis TYPE reply in words.
func redisTypeName(kind string) string {
	switch kind {
	case "zset":
		return "sorted set"
	case "string", "list", "set", "hash", "stream":
		return kind
	}
	return "value of type " + kind
}

var _ fmt.Stringer = (*redisStore)(nil)
