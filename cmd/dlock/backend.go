package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"
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
		{
			flag: "nats", metavar: "URL", env: []string{"DLOCK_NATS"},
			usage: "NATS server `URL`: nats://[user:pass@]host:port (or host:port), tls:// for TLS; repeat it for a cluster; run creates the lock bucket when missing, the other commands never",
			brief: "nats://host:4222, tls:// for TLS",
			one: func(ctx context.Context, u string, tf *tlsFiles) (store, error) {
				return openNATS(ctx, []string{u}, tf)
			},
			many: openNATS,
		},
		{
			flag: "mysql", metavar: "DSN", env: []string{"DLOCK_MYSQL"},
			usage: "MySQL or MariaDB `DSN`: user:pass@tcp(host:port)/db, or mysql://user:pass@host:port/db; run creates the lock table when missing, the other commands never",
			brief: "user:pass@tcp(host:port)/db",
			one:   openMySQL, multi: "one MySQL database",
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
