package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// Connection limits: an unreachable server must fail fast.
const (
	dialTimeout = 3 * time.Second
	pingTimeout = 5 * time.Second
)

// backend is one kind of lock server, selected by its repeatable flag. Adding a
// backend is one entry in backends(); adding a multi-server algorithm for a
// backend (Redlock) is filling in its many function.
type backend struct {
	flag    string   // --flag URL, repeatable
	metavar string   // what the flag takes, for messages
	env     []string // consulted in order when no server flag is given at all
	usage   string
	brief   string                                                                // what the flag takes, for "dlock --help"
	one     func(ctx context.Context, url string, tf *tlsFiles) (store, error)    // one server; nil: not available yet
	many    func(ctx context.Context, urls []string, tf *tlsFiles) (store, error) // several servers; nil: not available yet
	multi   string                                                                // what several servers mean, for errors
}

func backends() []backend {
	return []backend{
		{
			flag: "redis", metavar: "URL", env: []string{"DLOCK_REDIS", "REDIS_URL"},
			usage: "Redis server `URL`: redis://[user:pass@]host:port/db, rediss:// for TLS, unix:///path; a Cluster node is detected; several (an odd number of independent masters) mean Redlock",
			brief: "redis://[user:pass@]host:port/db, rediss:// for TLS",
			one:   openRedis, many: openRedlock, multi: "Redlock over several Redis masters",
		},
		{
			flag: "etcd", metavar: "URL", env: []string{"DLOCK_ETCD"},
			usage: "etcd client endpoint `URL`: http://host:port or host:port, https://host:port for TLS; repeat it for a cluster",
			brief: "http://host:2379, https:// for TLS",
			one: func(ctx context.Context, u string, tf *tlsFiles) (store, error) {
				return openEtcd(ctx, []string{u}, tf)
			},
			many: openEtcd,
		},
		{
			flag: "zk", metavar: "HOST:PORT", env: []string{"DLOCK_ZK"},
			usage: "ZooKeeper server `host:port` (or zk://host:port), its secure client port with --tls-*; repeat it for an ensemble",
			brief: "a ZooKeeper server",
			one:   func(ctx context.Context, u string, tf *tlsFiles) (store, error) { return openZK(ctx, []string{u}, tf) },
			many:  openZK,
		},
		{
			flag: "postgres", metavar: "URL", env: []string{"DLOCK_POSTGRES"},
			usage: "PostgreSQL `URL`: postgres://[user:pass@]host:port/db (or host:port); run creates the lock table when missing, the other commands never",
			brief: "postgres://[user:pass@]host:port/db",
			one:   openPostgres, multi: "one PostgreSQL database",
		},
	}
}

// servers holds the server flags of every backend.
type servers struct {
	urls map[string]*stringsFlag
	tls  tlsFiles
}

func (s *servers) define(fs *flag.FlagSet) {
	s.urls = map[string]*stringsFlag{}
	for _, b := range backends() {
		v := new(stringsFlag)
		s.urls[b.flag] = v
		fs.Var(v, b.flag, b.usage)
	}
	s.tls.define(fs)
}

// open connects to the servers given by flag, or else by the environment.
func (s *servers) open(ctx context.Context, e *env) (store, error) {
	chosen, urls, err := s.selected(e)
	if err != nil {
		return nil, err
	}
	s.tls.fromEnv(e.getenv)
	switch {
	case len(urls) > 1 && chosen.many == nil:
		what := chosen.multi
		if what == "" {
			what = "several --" + chosen.flag + " servers"
		}
		return nil, usageErrorf("%s is not available yet: give one --%s URL", what, chosen.flag)
	case len(urls) > 1:
		st, err := chosen.many(ctx, urls, &s.tls)
		if w, ok := st.(interface{ warning() string }); ok && err == nil && w.warning() != "" {
			fmt.Fprintf(e.stderr, "dlock: warning: %s\n", w.warning())
		}
		return st, err
	case chosen.one == nil:
		return nil, usageErrorf("the %s backend is not available yet", chosen.flag)
	}
	return chosen.one(ctx, urls[0], &s.tls)
}

// selected returns the backend and the servers given by flag, or else by the
// environment.
func (s *servers) selected(e *env) (*backend, []string, error) {
	var chosen *backend
	var urls []string
	for _, b := range backends() {
		if v := s.urls[b.flag]; v != nil && len(*v) > 0 {
			if chosen != nil {
				return nil, nil, usageErrorf("--%s and --%s: give the servers of one backend only", chosen.flag, b.flag)
			}
			chosen, urls = &b, *v
		}
	}
	if chosen == nil {
	search:
		for _, b := range backends() {
			for _, name := range b.env {
				if v := strings.Fields(e.getenv(name)); len(v) > 0 {
					chosen, urls = &b, v
					break search
				}
			}
		}
	}
	if chosen == nil {
		return nil, nil, usageErrorf("no lock server: %s", serverChoices())
	}
	return chosen, urls, nil
}

// serverChoices names the flags and variables that give a lock server.
func serverChoices() string {
	var flags, vars []string
	for _, b := range backends() {
		flags = append(flags, "--"+b.flag+" "+b.metavar)
		vars = append(vars, b.env[0])
	}
	return fmt.Sprintf("give %s, or set %s", strings.Join(flags, ", "), strings.Join(vars, ", "))
}

// store is what the subcommands need from a lock server.
type store interface {
	// String names the server for messages, without credentials.
	String() string
	// locker returns the lock of the requested kind, with opts as its defaults.
	locker(kind lockKind, opts ...dlock.Option) (dlock.Locker, error)
	// inspector shows and forces the server's locks (status, list, unlock).
	inspector() driver.Inspector
	// failures returns the log of the lock operations' failures; nil when
	// the backend keeps none.
	failures() *failureLog
	// explain returns err, or for an err matching dlock.ErrConflict an error
	// saying what the server holds under key instead of a lock (exit 65).
	explain(ctx context.Context, key string, err error) error
	close()
}

// lockKind is the primitive a run asks for.
type lockKind struct {
	fair      bool
	slots     int  // semaphore permits; 1 is a plain lock
	shared    bool // the read side of a read-write lock
	exclusive bool // the write side of a read-write lock
}

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

func (s *redisStore) locker(kind lockKind, opts ...dlock.Option) (dlock.Locker, error) {
	switch {
	case kind.shared:
		rw, err := redislock.NewRWMutex(s.rdb, opts...)
		if err != nil {
			return nil, err
		}
		return rw.RLocker(), nil
	case kind.exclusive:
		return redislock.NewRWMutex(s.rdb, opts...)
	case kind.slots != 1:
		return redislock.NewSemaphore(s.rdb, kind.slots, opts...)
	case kind.fair:
		return redislock.NewFair(s.rdb, opts...)
	}
	return redislock.New(s.rdb, opts...)
}

func (s *redisStore) inspector() driver.Inspector { return s.c }

func (s *redisStore) failures() *failureLog { return s.fails }

// inspectLock reads one lock through st's inspector.
func inspectLock(ctx context.Context, st store, key string) (lockInfo, error) {
	info, err := st.inspector().Inspect(ctx, key)
	if err != nil {
		return lockInfo{}, st.explain(ctx, key, err)
	}
	return newLockInfo(info), nil
}

// listLocks lists the locks matching pattern through st's inspector.
func listLocks(ctx context.Context, st store, pattern string) ([]lockInfo, error) {
	infos, err := driver.List(ctx, st.inspector(), pattern)
	if err != nil {
		return nil, err
	}
	out := make([]lockInfo, len(infos))
	for i, info := range infos {
		out[i] = newLockInfo(info)
	}
	return out, nil
}

// forceUnlock removes the holding of key through st's inspector.
func forceUnlock(ctx context.Context, st store, key string) (lockInfo, error) {
	info, err := st.inspector().ForceUnlock(ctx, key)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		return lockInfo{}, st.explain(ctx, key, err)
	}
	return newLockInfo(info), err
}

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
// (" (Redis key ... is a list)"), or is empty.
func conflictError(key, what string) error {
	return &exitError{code: exitDataErr, msg: fmt.Sprintf("key %q holds data that is not a dlock lock%s", key, what)}
}

// foreignData says which Redis key holds data that is not a dlock lock when
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

func newLockInfo(info dlock.LockInfo) lockInfo {
	li := lockInfo{Key: info.Key, Held: info.Held, Token: info.Token, LastToken: info.LastToken, Waiters: info.Waiters}
	if info.Held {
		li.TTLms = info.TTL.Milliseconds()
		li.Holder, li.Metadata = parseMeta(info.Metadata, info.Token)
		li.Holders, li.Limit = info.Holders, info.Limit
		if li.Holders == 0 {
			// A backend that does not count holders has exclusive locks only:
			// the same shape as on Redis.
			li.Holders, li.Limit = 1, 1
		}
		li.LastToken = max(li.LastToken, li.Token)
	}
	return li
}

var _ fmt.Stringer = (*redisStore)(nil)
