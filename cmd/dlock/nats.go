package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/natslock"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// openNATS connects to the NATS servers at urls (nats://[user:pass@]host:port,
// tls://host:port, or host:port; several are one cluster) and checks the
// connection. The lock bucket is created by run (natslock's Driver.Migrate)
// when missing, never by the inspecting commands.
func openNATS(ctx context.Context, urls []string, tf *tlsFiles) (store, error) {
	servers := make([]string, len(urls))
	for i, u := range urls {
		if !strings.Contains(u, "://") {
			if _, err := hostPort(u); err != nil {
				return nil, err
			}
			u = "nats://" + u
		}
		servers[i] = u
	}
	where := "NATS at " + maskURL(strings.Join(urls, ","))
	opts := []nats.Option{nats.Timeout(dialTimeout), nats.Name("dlock")}
	if tf.set() {
		cfg, err := tf.apply(&tls.Config{MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(cfg))
	}
	nc, err := nats.Connect(strings.Join(servers, ","), opts...)
	if err != nil {
		return nil, unavailableErrorf("cannot reach %s: %s", where, redact(oneLine(err), strings.Join(urls, ",")))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	d, err := natslock.NewDriver(js)
	if err != nil {
		nc.Close()
		return nil, err
	}
	f, err := natslock.NewFairDriver(js)
	if err != nil {
		nc.Close()
		return nil, err
	}
	// The semaphores' inspector: it reads every number of permits.
	sem, err := natslock.NewSemaphoreDriver(js, 1)
	if err != nil {
		nc.Close()
		return nil, err
	}
	var migrate sync.Once
	var migrateErr error
	return natsStore{js: js, fair: f, mutexStore: &mutexStore{
		where: where,
		newc: func(opts ...dlock.Option) (dlock.Locker, error) {
			// A run creates the bucket when it is missing.
			migrate.Do(func() {
				mctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
				defer cancel()
				migrateErr = d.Migrate(mctx)
			})
			if migrateErr != nil {
				return nil, migrateErr
			}
			return natslock.NewClient(d, opts...)
		},
		insp:  natsInspector{d, []driver.Inspector{f, sem}, where},
		plain: driver.KindMutex,
		closer: func() {
			d.Close()
			f.Close()
			sem.Close()
			nc.Close()
		},
		// purge removes every message of the keys from the bucket's
		// stream (dlock verify's own keys).
		purge: func(ctx context.Context, keys []string) (int, error) {
			s, err := js.Stream(ctx, "KV_"+natslock.DefaultBucket)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return 0, nil
			}
			if err != nil {
				return 0, err
			}
			n := 0
			for _, k := range keys {
				if err := natslock.CheckKey(k); err != nil {
					continue // never a lock's
				}
				before, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+natslock.DefaultBucket+"."+k))
				if err != nil {
					return n, err
				}
				if len(before.State.Subjects) == 0 {
					continue
				}
				if err := s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+natslock.DefaultBucket+"."+k)); err != nil {
					return n, err
				}
				n++
			}
			return n, nil
		},
	}}, nil
}

// natsStore is a store on NATS servers: natslock's mutex, with --fair its
// fair lock, with -n its semaphores (each in a bucket of its own, created by
// a run when missing); it has no read-write lock.
type natsStore struct {
	*mutexStore
	js   jetstream.JetStream
	fair *natslock.FairDriver
}

func (s natsStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	switch kind {
	case plainLock:
		return s.newc(opts...)
	case fairLock:
		mctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		defer cancel()
		if err := s.fair.Migrate(mctx); err != nil {
			return nil, err
		}
		return dlock.NewClient(s.fair, opts...)
	case semaphoreLock:
		d, err := natslock.NewSemaphoreDriver(s.js, permits)
		if err != nil {
			return nil, err
		}
		mctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
		defer cancel()
		if err := d.Migrate(mctx); err != nil {
			return nil, err
		}
		return dlock.NewClient(d, opts...)
	}
	return nil, usageErrorf("-s and -x are not available on %s: it has no read-write lock", s.where)
}

// natsInspector is the inspector of a NATS store, over its buckets (the
// plain locks', the fair locks', the semaphores'): a key is looked up in the
// plain locks' bucket first, then in the others. On servers without a bucket
// (which it does not create) a list leaves it out, and an inspection or a
// force of a key in none says there is no bucket, exit 1.
type natsInspector struct {
	*natslock.Driver
	queues []driver.Inspector // the fair locks' and the semaphores'
	where  string
}

func (n natsInspector) noBucket(err error) error {
	if !errors.Is(err, natslock.ErrNoBucket) {
		return err
	}
	return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf("no dlock bucket in %s: nothing has been locked there (dlock run creates it; the other commands create nothing)", n.where)}
}

func (n natsInspector) Inspect(ctx context.Context, key string) (dlock.LockInfo, error) {
	info, err := n.Driver.Inspect(ctx, key)
	if err == nil && info.Held || err != nil && !errors.Is(err, natslock.ErrNoBucket) {
		return info, err
	}
	for _, q := range n.queues {
		qinfo, qerr := q.Inspect(ctx, key)
		switch {
		case qerr == nil && qinfo.Held:
			return qinfo, nil
		case qerr == nil && err != nil:
			info, err = qinfo, nil // a bucket that exists: the key is free
		case qerr != nil && !errors.Is(qerr, natslock.ErrNoBucket):
			return qinfo, qerr
		}
	}
	return info, n.noBucket(err)
}

func (n natsInspector) ForceUnlock(ctx context.Context, key string) (dlock.LockInfo, error) {
	info, err := n.Driver.ForceUnlock(ctx, key)
	if err == nil || !errors.Is(err, dlock.ErrNotHeld) && !errors.Is(err, natslock.ErrNoBucket) {
		return info, err
	}
	for _, q := range n.queues {
		qinfo, qerr := q.ForceUnlock(ctx, key)
		switch {
		case qerr == nil:
			return qinfo, nil
		case !errors.Is(qerr, natslock.ErrNoBucket) && !errors.Is(qerr, dlock.ErrNotHeld):
			return qinfo, qerr
		case errors.Is(err, natslock.ErrNoBucket):
			info, err = qinfo, qerr // a bucket that exists: the key is free
		}
	}
	return info, n.noBucket(err)
}

// ListPrefix lists the locks of every bucket; a bucket that does not exist
// has none.
func (n natsInspector) ListPrefix(ctx context.Context, prefix string) ([]dlock.LockInfo, error) {
	infos, err := n.Driver.ListPrefix(ctx, prefix)
	if err != nil && !errors.Is(err, natslock.ErrNoBucket) {
		return nil, err
	}
	for _, q := range n.queues {
		more, err := q.ListPrefix(ctx, prefix)
		if err != nil && !errors.Is(err, natslock.ErrNoBucket) {
			return nil, err
		}
		infos = append(infos, more...)
	}
	return infos, nil
}
