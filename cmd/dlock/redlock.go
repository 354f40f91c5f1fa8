package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/redis/go-redis/v9"
)

// redlockStore is a store on several independent Redis masters (Redlock).
type redlockStore struct {
	rdbs  []*redis.Client
	where string
	d     *redlock.Driver
	c     *redlock.Client
	fails *failureLog
	warn  string // what the user must know before the lock is used: masters that cannot be reached
}

// openRedlock connects to the Redis masters at urls. A majority must answer;
// the others may come back later. A Cluster node is refused: Redlock needs
// independent masters.
func openRedlock(ctx context.Context, urls []string, tf *tlsFiles) (store, error) {
	s := &redlockStore{}
	var addrs []string
	var down []error
	for _, u := range urls {
		rdb, opt, where, cluster, err := dialRedis(ctx, u, tf)
		var ex *exitError
		if err != nil && errors.As(err, &ex) && ex.code == exitUnavailable {
			// Unreachable for now: keep a client, which reconnects when it can.
			var perr error
			if opt, perr = parseRedisURL(u, tf); perr != nil {
				s.close()
				return nil, err
			}
			rdb, where = redis.NewClient(opt), "Redis at "+opt.Addr
			down = append(down, err)
		} else if err != nil {
			s.close()
			return nil, err
		}
		s.rdbs = append(s.rdbs, rdb)
		if cluster {
			s.close()
			return nil, usageErrorf("%s is a Redis Cluster node: Redlock needs independent masters (give one --redis URL to use the Cluster)", where)
		}
		addrs = append(addrs, opt.Addr)
	}
	nodes := make([]redis.UniversalClient, len(s.rdbs))
	for i, r := range s.rdbs {
		nodes[i] = r
	}
	d, err := redlock.NewDriver(nodes)
	if errors.Is(err, dlock.ErrInvalid) {
		s.close()
		return nil, usageErrorf("Redlock: %s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), dlock.ErrInvalid.Error()+": "), "redlock: "))
	}
	if err != nil {
		s.close()
		return nil, err
	}
	if len(down) > len(urls)-d.Quorum() {
		s.close()
		return nil, unavailableErrorf("Redlock needs %d of %d masters, %d cannot be reached: %v", d.Quorum(), len(urls), len(down), errors.Join(down...))
	}
	if len(down) > 0 {
		left := len(urls) - d.Quorum() - len(down)
		tolerance := fmt.Sprintf("%d more may fail", left)
		if left == 0 {
			tolerance = "no failure tolerance left: one more master down and no lock can be taken or kept"
		}
		s.warn = fmt.Sprintf("Redlock: %d of %d masters cannot be reached (%s): %s",
			len(down), len(urls), oneLine(errors.Join(down...)), tolerance)
	}
	s.d = d
	s.fails = &failureLog{hide: urls}
	for _, r := range s.rdbs {
		r.AddHook(failureHook{s.fails})
	}
	s.c, err = redlock.NewClient(d)
	if err != nil {
		s.close()
		return nil, err
	}
	s.where = fmt.Sprintf("Redlock over %d Redis masters (%s)", len(urls), strings.Join(addrs, ", "))
	return s, nil
}

func (s *redlockStore) String() string { return s.where }

func (s *redlockStore) warning() string { return s.warn }

func (s *redlockStore) close() {
	for _, r := range s.rdbs {
		_ = r.Close()
	}
}

func (s *redlockStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	if kind == semaphoreLock {
		return nil, usageErrorf("-n %d: semaphores are not available yet (-n 1 is the plain lock)", permits)
	}
	if kind == fairLock {
		return nil, usageErrorf("--fair is not available with Redlock (several --redis URLs): give one --redis URL")
	}
	return redlock.NewClient(s.d, opts...)
}

func (s *redlockStore) inspector() driver.Inspector { return s.c }

func (s *redlockStore) failures() *failureLog { return s.fails }

func (s *redlockStore) explain(ctx context.Context, key string, err error) error {
	if !errors.Is(err, dlock.ErrConflict) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
	defer cancel()
	for _, rdb := range s.rdbs {
		in, ierr := redislock.NewInspector(rdb)
		if ierr != nil {
			break
		}
		if _, ierr = in.Inspect(ctx, key); foreignData(ierr) != "" {
			return conflictError(key, foreignData(ierr)+" on "+rdb.Options().Addr)
		}
	}
	return conflictError(key, "")
}

var _ fmt.Stringer = (*redlockStore)(nil)
