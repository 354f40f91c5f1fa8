package main

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// etcdMutexTTL is the TTL in seconds of the etcd/mutex variant's session: dlock's
// default TTL, so that both renew as often.
const etcdMutexTTL = 15

// etcdMutexVariant is etcd's own lock recipe, the baseline of the etcd variant:
// concurrency.Mutex on a concurrency.Session (one lease, kept alive by the
// session, shared by all of its locks), one etcd client and session per locker.
var etcdMutexVariant = variant{name: "etcd/mutex", lib: "etcd", in: inA | inBC, on: onEtcd,
	desc: "etcd's concurrency.NewMutex on a concurrency.Session (TTL 15s, kept alive by the session), one clientv3 client and session per locker; a single-member etcd",
	open: openEtcdMutex}

// openEtcdMutex opens a session on an etcd client of its own, whose requests
// (gRPC messages sent, the session's keep-alives included) count as lock
// commands.
func openEtcdMutex(o opening) (locker, error) {
	cli, err := countedEtcdClient(o)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(etcdMutexTTL))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return etcdMutexLocker{cli: cli, s: s}, nil
}

type etcdMutexLocker struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

// mutexPrefix starts the keys of the etcd/mutex variant's locks.
const mutexPrefix = "bench-mutex/"

func (l etcdMutexLocker) mutex(key string) mutex {
	return etcdMutex{concurrency.NewMutex(l.s, mutexPrefix+key)}
}

// notified: a waiter watches the key ahead of its own.
func (etcdMutexLocker) notified() bool { return true }

// Close implements io.Closer: it revokes the session's lease and closes the
// client.
func (l etcdMutexLocker) Close() error {
	err := l.s.Close()
	return errors.Join(err, l.cli.Close())
}

type etcdMutex struct{ m *concurrency.Mutex }

func (m etcdMutex) lock(ctx context.Context) error {
	err := m.m.Lock(ctx)
	if err != nil && ctx.Err() != nil {
		// Lock removed its key before returning.
		return errors.Join(errNotObtained, err)
	}
	return err
}

func (m etcdMutex) unlock(ctx context.Context) error { return m.m.Unlock(ctx) }

// countedEtcdClient opens an etcd client of its own on the run's etcd server,
// whose requests (gRPC messages sent, stream messages included) count as lock
// commands.
func countedEtcdClient(o opening) (*clientv3.Client, error) {
	if o.e == nil || o.e.cons.etcd == nil {
		return nil, errors.New("bench: no etcd server in this run")
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{o.e.cons.etcd.Addr},
		DialTimeout: connectTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithStatsHandler(grpcCounter{o.cnt})},
	})
}
