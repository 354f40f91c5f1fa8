package main

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/zklock"
	"github.com/go-zookeeper/zk"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// hostPort checks one server address given as host:port or a URL with a scheme
// of schemes, and returns host:port.
func hostPort(raw string, schemes ...string) (string, error) {
	addr, _, err := hostPortScheme(raw, schemes...)
	return addr, err
}

// hostPortScheme is hostPort, returning the URL's scheme too ("" for host:port).
func hostPortScheme(raw string, schemes ...string) (string, string, error) {
	addr, scheme := raw, ""
	if i := strings.Index(raw, "://"); i >= 0 {
		u, err := url.Parse(raw)
		if err != nil {
			return "", "", usageErrorf("bad server URL %s: %s", maskURL(raw), urlProblem(err, raw))
		}
		if u.User != nil {
			return "", "", usageErrorf("bad server URL %s: no user name or password expected", maskURL(raw))
		}
		ok := false
		for _, s := range schemes {
			ok = ok || u.Scheme == s
		}
		if !ok {
			return "", "", usageErrorf("bad server URL %s: scheme %q (want %s)", maskURL(raw), u.Scheme, strings.Join(schemes, " or "))
		}
		if u.Path != "" && u.Path != "/" {
			return "", "", usageErrorf("bad server URL %s: no path expected", maskURL(raw))
		}
		addr, scheme = u.Host, u.Scheme
	}
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 1 || n > 65535 || host == "" {
		return "", "", usageErrorf("bad server address %s: want host:port", maskURL(raw))
	}
	return addr, scheme, nil
}

// openEtcd connects to the etcd cluster whose client endpoints are urls
// (http://host:port or host:port, https://host:port for TLS) and checks that it
// answers.
func openEtcd(ctx context.Context, urls []string, tf *tlsFiles) (store, error) {
	eps := make([]string, len(urls))
	secure := 0
	for i, u := range urls {
		hp, scheme, err := hostPortScheme(u, "http", "https", "etcd")
		if err != nil {
			return nil, err
		}
		eps[i] = "http://" + hp
		if scheme == "https" {
			eps[i] = "https://" + hp
			secure++
		}
	}
	cfg := clientv3.Config{Endpoints: eps, DialTimeout: dialTimeout, Logger: zap.NewNop()}
	switch {
	case secure > 0 && secure < len(eps):
		return nil, usageErrorf("--etcd: every endpoint is https:// or none is")
	case secure > 0:
		var err error
		if cfg.TLS, err = tf.apply(nil); err != nil {
			return nil, err
		}
	case tf.set():
		return nil, plainWithTLSFiles(urls[0], "https://")
	}
	where := "etcd at " + strings.Join(eps, ",")
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, unavailableErrorf("cannot reach %s: %v", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if _, err := cli.Get(pctx, "dlock/ping"); err != nil {
		cli.Close()
		return nil, unavailableErrorf("cannot reach %s: %v", where, err)
	}
	c, err := etcdlock.New(cli)
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &mutexStore{
		where: where,
		newc: func(opts ...dlock.Option) (dlock.Locker, error) {
			return etcdlock.New(cli, opts...)
		},
		insp:   c,
		plain:  driver.KindFair,
		sync:   c.Driver().(driver.SyncDriver),
		closer: func() { _ = cli.Close() },
		purge: func(ctx context.Context, keys []string) (int, error) {
			return etcdPurge(ctx, cli, keys)
		},
	}, nil
}

// etcdPurge deletes the entries of the locks named keys: their queues,
// abandon marks and lock-delay marks.
func etcdPurge(ctx context.Context, cli *clientv3.Client, keys []string) (int, error) {
	n := 0
	for _, key := range keys {
		// AbandonKey(key, "") is the prefix of the lock's abandon marks.
		resp, err := cli.Txn(ctx).Then(
			clientv3.OpDelete(etcdlock.QueuePrefix(key), clientv3.WithPrefix()),
			clientv3.OpDelete(etcdlock.AbandonKey(key, ""), clientv3.WithPrefix()),
			clientv3.OpDelete(etcdlock.DelayKey(key))).
			Commit()
		if err != nil {
			return n, err
		}
		for _, r := range resp.Responses {
			n += int(r.GetResponseDeleteRange().Deleted)
		}
	}
	return n, nil
}

// zkSession is the ZooKeeper session timeout of a dlock command: the longest TTL
// its locks can have (zklock caps a lease at its session).
const zkSession = 30 * time.Second

// zkDownError says on one line why no ZooKeeper session was made: the first
// server's connection error when it cannot be dialled, else that no session
// came within the time allowed.
func zkDownError(ctx context.Context, where string, addrs []string, err error) error {
	if !errors.Is(err, dlock.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	c, derr := new(net.Dialer).DialContext(dctx, "tcp", addrs[0])
	if derr != nil {
		return unavailableErrorf("cannot reach %s: %v", where, derr)
	}
	_ = c.Close()
	return unavailableErrorf("cannot reach %s: no ZooKeeper session within %v", where, pingTimeout)
}

// openZK connects to the ZooKeeper ensemble at servers (host:port or
// zk://host:port) and checks that it answers. With TLS files it speaks TLS
// (to ZooKeeper's secureClientPort).
func openZK(ctx context.Context, servers []string, tf *tlsFiles) (store, error) {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		hp, err := hostPort(s, "zk", "zookeeper")
		if err != nil {
			return nil, err
		}
		addrs[i] = hp
	}
	where := "ZooKeeper at " + strings.Join(addrs, ",")
	cctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	opts := []zklock.Option{zklock.WithSessionTimeout(zkSession), zklock.WithLogger(func(string, ...any) {})}
	var dialer zk.Dialer
	if tf.set() {
		cfg, err := tf.apply(nil)
		if err != nil {
			return nil, err
		}
		where += " (TLS)"
		dialer = tlsDialer(cfg)
		opts = append(opts, zklock.WithDialer(dialer))
	}
	d, err := zklock.NewDriver(cctx, addrs, opts...)
	if err != nil {
		return nil, zkDownError(ctx, where, addrs, err)
	}
	c, err := zklock.NewClient(d)
	if err != nil {
		_ = d.Close()
		return nil, err
	}
	return &mutexStore{
		where: where,
		newc: func(opts ...dlock.Option) (dlock.Locker, error) {
			return zklock.NewClient(d, opts...)
		},
		insp:   c,
		plain:  driver.KindFair,
		closer: func() { _ = d.Close() },
		purge: func(ctx context.Context, keys []string) (int, error) {
			return zkPurge(ctx, addrs, dialer, keys)
		},
	}, nil
}

// zkPurge deletes the znodes of the locks named keys and everything under
// them, through a session of its own.
func zkPurge(ctx context.Context, addrs []string, dialer zk.Dialer, keys []string) (int, error) {
	if dialer == nil {
		dialer = net.DialTimeout
	}
	conn, _, err := zk.Connect(addrs, zkSession, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}), zk.WithDialer(dialer))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	n := 0
	var remove func(path string) error
	remove = func(path string) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sub, _, err := conn.Children(path)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range sub {
			if err := remove(path + "/" + k); err != nil {
				return err
			}
		}
		if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		n++
		return nil
	}
	for _, key := range keys {
		// A run's name (letters, digits, '.', '-', ':') is its own znode name.
		if err := remove(zklock.DefaultRoot + "/" + key); err != nil {
			return n, err
		}
	}
	return n, nil
}

// zkQuiet drops the ZooKeeper client's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}
