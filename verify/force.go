package verify

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/dlock-go/dlock/zklock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// forceInspector returns the Inspector that FaultForce unlocks through, over a
// connection of its own straight to the store of c (not through the proxies;
// on Sentinel, to the primary the Sentinels name; on Cluster, to the master of
// the key; on Redlock, to every master), and the function that closes it; nil
// when c has no FaultForce. It fails on a store it does not force (legacy, a
// primary with a replica failed over by hand).
func forceInspector(c Config, st *store) (driver.Inspector, func(), error) {
	none := func() {}
	if !slices.Contains(c.Faults, FaultForce) {
		return nil, none, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch {
	case st.mem != nil:
		return st.mem, none, nil
	case st.pg != nil:
		pool, err := pgxpool.New(ctx, st.pg.URL)
		if err != nil {
			return nil, none, err
		}
		d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
		if err != nil {
			pool.Close()
			return nil, none, err
		}
		return d, pool.Close, nil
	case st.zk != nil:
		d, err := zklock.NewDriver(ctx, []string{st.zk.Addr}, zklock.WithLogger(func(string, ...any) {}))
		if err != nil {
			return nil, none, err
		}
		return d, func() { d.Close() }, nil
	case st.etcd != nil:
		cli, err := clientv3.New(clientv3.Config{Endpoints: st.etcd.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, none, err
		}
		d, err := etcdlock.NewDriver(cli)
		if err != nil {
			cli.Close()
			return nil, none, err
		}
		return d, func() { cli.Close() }, nil
	case st.sentinels != nil:
		return redisInspector(redis.NewFailoverClient(&redis.FailoverOptions{MasterName: st.sentinels[0].MasterName, SentinelAddrs: st.addrs}))
	case st.shards != nil:
		return redisInspector(redis.NewClusterClient(&redis.ClusterOptions{Addrs: st.addrs}))
	case len(st.servers) > 1 && !st.legacy: // Redlock's masters
		var nodes []redis.UniversalClient
		closeAll := func() {
			for _, n := range nodes {
				n.Close()
			}
		}
		for _, sv := range st.servers {
			nodes = append(nodes, redis.NewClient(&redis.Options{Addr: sv.Addr}))
		}
		d, err := redlock.NewDriver(nodes)
		if err != nil {
			closeAll()
			return nil, none, err
		}
		return d, closeAll, nil
	case len(st.servers) == 1 && st.replica == nil && !st.legacy:
		rdb := redis.NewClient(&redis.Options{Addr: st.servers[0].Addr})
		if c.ForceGap {
			rdb.AddHook(subscriptionGap{rdb})
		}
		return redisInspector(rdb)
	}
	return nil, none, fmt.Errorf("%w: verify: no force-unlock on this store", dlock.ErrInvalid)
}

// redisInspector returns redislock's Inspector over rdb, and the function that
// closes rdb.
func redisInspector(rdb redis.UniversalClient) (driver.Inspector, func(), error) {
	in, err := redislock.NewInspector(rdb)
	if err != nil {
		rdb.Close()
		return nil, func() {}, err
	}
	return in, func() { rdb.Close() }, nil
}

// forceHeld force-unlocks the first of keys, from the one at first on, that in
// shows held, and records the fault: its completion names the holding removed
// (OK), a lock freed in between (Fail), or an unknown outcome (Info). It
// reports false when no key was held.
func forceHeld(ctx context.Context, in driver.Inspector, keys []string, first int, rec *Recorder) bool {
	for i := range keys {
		key := keys[(first+i)%len(keys)]
		ictx, cancel := context.WithTimeout(ctx, time.Second)
		info, err := in.Inspect(ictx, key)
		cancel()
		if err != nil || !info.Held {
			continue
		}
		e := Event{Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1, Key: key}
		rec.Record(e)
		fctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		info, err = in.ForceUnlock(fctx, key)
		cancel()
		switch {
		case err == nil:
			e.Type, e.Token, e.Owner = OK, info.Token, info.Owner
		case errors.Is(err, dlock.ErrNotHeld):
			e.Type = Fail
		default:
			e.Type, e.Err = Info, err.Error()
		}
		rec.Record(e)
		return true
	}
	return false
}

// subscriptionGap is the hook of Config.ForceGap on the force's client: it
// sends the publish of a force's loss in one write after CLIENT KILL TYPE
// pubsub, so that the server drops every subscriber before it publishes.
type subscriptionGap struct{ rdb *redis.Client }

// DialHook implements redis.Hook.
func (subscriptionGap) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: the publish on redislock's loss channel
// goes after the kill.
func (s subscriptionGap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() != "publish" || len(args) < 2 || args[1] != redislock.Prefix+"lost" {
			return next(ctx, cmd)
		}
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientKillByFilter(ctx, "TYPE", "pubsub")
			return p.Process(ctx, cmd)
		})
		return err
	}
}

// ProcessPipelineHook implements redis.Hook.
func (subscriptionGap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
