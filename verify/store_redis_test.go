package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"testing"
)

// The plain Redis lock and its primitives (plain, fair, reentrant,
// read-write, semaphore) on one server, a primary and a replica, Sentinels or
// a Cluster.
func init() {
	registerBackend(&backend{
		name:      "redis",
		faults:    []string{FaultCrash, FaultPowerLoss, FaultFailover, FaultForce},
		start:     startRedisFamily,
		locker:    redisLocker,
		inspector: redisFamilyInspector,
		sync:      redisSync,
		leftover:  redisLeftover,
		fault:     redisFault,
		resize:    redisResize,
		watch:     redisWatch,
		grace: func(s Spec) time.Duration {
			if s.Kind != "plain" {
				// A queue entry of a waiter that died, and a lock handed
				// over to one, stay FairWaiterTTL.
				return time.Second + redislock.FairWaiterTTL
			}
			return time.Second
		},
	})
}

// Redis topologies of the lock store (Config.Topology, Spec.Topology).
const (
	// TopologySentinel is a primary and a replica watched by three Sentinels;
	// workers follow the primary through them, and FaultFailover kills the
	// primary and lets the Sentinels promote the lagging replica.
	TopologySentinel = "sentinel"
	// TopologyCluster is a Redis Cluster of three masters (each with a
	// replica when FaultCrash is among the faults: the crash kills a master
	// and its replica takes over).
	TopologyCluster = "cluster"
)

// redisStore is what the Redis backends (redis, redlock, legacy) keep of
// their servers (store.own).
type redisStore struct {
	servers []*testserver.Redis
	replica *testserver.Redis
	proxy   *Proxy // the single Redis's (a failover points it at the replica)

	sentinels []*testserver.Sentinel
	// shards are the cluster's masters, each followed by its replicas.
	shards [][]*testserver.Redis

	legacy bool // the legacy timestamp protocol's store: keys without expiry
}

// redisOf returns the Redis servers of st (nil: another backend's store).
func redisOf(st *store) *redisStore {
	r, _ := st.own.(*redisStore)
	return r
}

// startRedisFamily starts the Redis servers of c: Masters of them (one by
// default), a primary and its replica, Sentinels or a Cluster, with c's
// persistence and redis-server executable.
func startRedisFamily(t testing.TB, c Config) *store {
	rs := &redisStore{legacy: c.Spec.Backend == "legacy"}
	st := &store{own: rs}
	var extra []string
	switch c.Persist {
	case "rdb":
		extra = []string{"--save", "3600 1"}
	case "aof":
		extra = []string{"--appendonly", "yes", "--appendfsync", "everysec"}
	}
	startRedis := func(args ...string) *testserver.Redis {
		if c.Server != "" {
			return testserver.StartRedisBinary(t, c.Server, args...)
		}
		return testserver.StartRedis(t, args...)
	}
	if c.Topology == TopologyCluster {
		replicas := 0
		if slices.Contains(c.Faults, FaultCrash) {
			replicas = 1
		}
		// The replicas replicate as the user repl, whose switching off
		// cuts them off before a crash (see clusterCrash).
		cl := testserver.StartClusterWithReplicas(t, 3, replicas, replAuth...)
		for i, m := range cl.Nodes {
			rs.shards = append(rs.shards, append([]*testserver.Redis{m}, cl.Replicas[i]...))
		}
		st.addrs, st.nodes = cl.Addrs(), len(rs.shards)
		return st
	}
	if c.Replica || c.Topology == TopologySentinel {
		auth := slices.Clone(replAuth)
		if c.Resync {
			auth = append(auth, "--repl-diskless-sync-delay", "0")
		}
		p := startRedis(append(extra, auth...)...)
		r := startRedis(append(append(extra, auth...), "--replicaof", "127.0.0.1", fmt.Sprint(p.Port))...)
		rs.servers, rs.replica, st.nodes = []*testserver.Redis{p}, r, 1
		if c.Topology == TopologySentinel {
			waitReplica(t, p.Addr)
			rs.sentinels = testserver.StartSentinelsDownAfter(t, p, 3, 2*time.Second)
			for _, s := range rs.sentinels {
				st.addrs = append(st.addrs, s.Addr)
			}
			return st
		}
		rs.proxy = st.proxyTo(t, p.Addr)
		st.addrs = []string{rs.proxy.Addr()}
		waitReplica(t, p.Addr)
		return st
	}
	n := max(c.Masters, 1)
	for range n {
		s := startRedis(extra...)
		rs.servers = append(rs.servers, s)
		st.addrs = append(st.addrs, s.Addr)
	}
	st.nodes = n
	st.proxify(t) // the workers dial through proxies that inject the network's faults
	if n == 1 {
		rs.proxy = st.proxies[0]
	}
	return st
}

// replAuth are the servers' arguments of a primary and its replicas: the
// replicas replicate as the user repl, which a failover or a Cluster master's
// crash switches off to cut them off from the primary's last writes.
var replAuth = []string{"--user", "repl", "on", ">replpw", "~*", "&*", "+@all", "--masteruser", "repl", "--masterauth", "replpw"}

// redisClients returns a client of each address of s.Lock, with the workers'
// options, and the function that closes them.
func redisClients(s Spec) ([]*redis.Client, func()) {
	var rdbs []*redis.Client
	for _, a := range s.Lock {
		rdbs = append(rdbs, redis.NewClient(redisOptions(a)))
	}
	return rdbs, func() {
		for _, c := range rdbs {
			c.Close()
		}
	}
}

// redisUniversal returns the client a worker of s locks with on one Redis
// server, through Sentinels or on a Cluster, and the function that closes it.
func redisUniversal(s Spec) (redis.UniversalClient, func(), error) {
	if len(s.Lock) == 0 {
		return nil, nil, fmt.Errorf("%w: verify: no lock store address", dlock.ErrInvalid)
	}
	var uc redis.UniversalClient
	switch s.Topology {
	case TopologySentinel:
		uc = redis.NewFailoverClient(failoverOptions(s.Lock))
	case TopologyCluster:
		uc = redis.NewClusterClient(clusterOptions(s.Lock))
	default:
		uc = redis.NewClient(redisOptions(s.Lock[0]))
	}
	return uc, func() { uc.Close() }, nil
}

// redisLocker returns the Locker of s's kind on Redis.
func redisLocker(s Spec) (dlock.Locker, func(), error) {
	uc, closeFn, err := redisUniversal(s)
	if err != nil {
		return nil, func() {}, err
	}
	var lk dlock.Locker
	switch s.Kind {
	case "plain":
		lk, err = redislock.New(uc)
	case "fair":
		lk, err = redislock.NewFair(uc)
	case "reentrant":
		lk, err = redislock.NewReentrant(uc)
	case "rw":
		var m *redislock.RWMutex
		m, err = redislock.NewRWMutex(uc)
		if err == nil {
			lk = m // the write side; the worker takes its read side from it
		}
	case "sem":
		lk, err = redislock.NewSemaphore(uc, s.N)
	default:
		err = fmt.Errorf("%w: verify: lock kind %q", dlock.ErrInvalid, s.Kind)
	}
	return lk, closeFn, err
}

// redisSync returns redislock's latch and barrier driver on s's server.
func redisSync(s SyncSpec) (driver.SyncDriver, func(), error) {
	rdb := redis.NewClient(redisOptions(s.Addr[0]))
	d, err := redislock.NewSyncDriver(rdb)
	return d, func() { rdb.Close() }, err
}

// redisFamilyInspector returns the Inspector that FaultForce unlocks through
// on the plain lock's store, over a connection of its own straight to it (not
// through the proxies; on Sentinel, to the primary the Sentinels name; on
// Cluster, to the master of the key). It fails on a primary with a replica
// failed over by hand.
func redisFamilyInspector(c Config, st *store) (driver.Inspector, func(), error) {
	rs := redisOf(st)
	switch {
	case rs.sentinels != nil:
		return redisInspector(redis.NewFailoverClient(&redis.FailoverOptions{MasterName: rs.sentinels[0].MasterName, SentinelAddrs: st.addrs}))
	case rs.shards != nil:
		return redisInspector(redis.NewClusterClient(&redis.ClusterOptions{Addrs: st.addrs}))
	case len(rs.servers) == 1 && rs.replica == nil:
		rdb := redis.NewClient(&redis.Options{Addr: rs.servers[0].Addr})
		if c.ForceGap {
			rdb.AddHook(subscriptionGap{rdb})
		}
		return redisInspector(rdb)
	}
	return nil, func() {}, fmt.Errorf("%w: verify: no force-unlock on this store", dlock.ErrInvalid)
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

// redisResize returns a semaphore Client of the single server that adopts
// the stored size.
func redisResize(c Config, st *store) (*dlock.Client, func(), error) {
	rs := redisOf(st)
	if len(rs.servers) != 1 {
		return nil, nil, fmt.Errorf("%w: verify: resizes on %s need one server", dlock.ErrInvalid, c.Spec.Backend)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.servers[0].Addr})
	cl, err := redislock.NewSemaphore(rdb, redislock.StoredSize)
	return cl, func() { rdb.Close() }, err
}

// redisWatch records, on Sentinels, every failover they go through.
func redisWatch(ctx context.Context, st *store, rec *Recorder) {
	if rs := redisOf(st); rs.sentinels != nil {
		watchSentinels(ctx, rs.sentinels[0], rec)
	}
}

// redisLeftover returns what is left of the locks on the Redis servers: keys
// (but those retained by design, and the legacy lock's stale stamps).
func redisLeftover(t testing.TB, st *store) []string {
	var left []string
	bg := context.Background()
	rs := redisOf(st)
	addrs := st.addrs
	switch {
	case rs.servers != nil: // directly, not through the proxies; with a replica, the primary of the moment
		addrs = nil
		for _, s := range rs.servers {
			addrs = append(addrs, s.Addr)
		}
	case rs.shards != nil: // every node: each lists the keys of its slots
		addrs = nil
		for _, sh := range rs.shards {
			addrs = append(addrs, sh[0].Addr)
		}
	}
	for _, a := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: a})
		keys, err := rdb.Keys(bg, "*").Result()
		if err != nil {
			t.Errorf("verify: scanning the lock store: %v", err)
		}
		for _, k := range keys {
			if !retained(k) && !(rs.legacy && staleStamp(rdb, k)) {
				left = append(left, k)
			}
		}
		rdb.Close()
	}
	return left
}

// staleStamp reports whether the legacy lock key k holds a stamp (ms since
// the epoch) that has run out: the protocol's keys have no expiry (as in the
// recipes it speaks), so a holder that died holding leaves its key, which
// holds nothing once its stamp has passed, until the next acquisition takes
// it over.
func staleStamp(rdb *redis.Client, k string) bool {
	v, err := rdb.Get(context.Background(), k).Int64()
	return err == nil && v < time.Now().UnixMilli()
}

// retained reports whether key is one that outlives its locks by design: a
// fence counter (redislock, Redlock), a resized semaphore's size, or a legacy
// lock's companion hash, which keeps the fencing counter for FenceRetention.
func retained(key string) bool {
	return strings.HasSuffix(key, ":fence") || strings.HasSuffix(key, ":size") ||
		strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}:dlock")
}

// redisFault injects the Redis store's faults: a crash of a server (with RDB,
// after a snapshot shortly before it) or of a Cluster master (its replica
// takes over), and a failover to the lagging replica.
func redisFault(ctx context.Context, c Config, st *store, f string, d draws, rec *Recorder) (bool, error) {
	rs := redisOf(st)
	// takeover records fault f around do, a replica taking over from its
	// primary: failed when do found no replica in sync.
	takeover := func(what string, do func() error) (bool, error) {
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		if err := do(); errors.Is(err, errNoReplica) {
			rec.Record(Event{Op: OpNemesis, Type: Fail, Fault: f, Target: -1})
			return true, nil
		} else if err != nil {
			return true, fmt.Errorf("verify: %s: %v", what, err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		return true, nil
	}
	// stored records what the promoted replica at addr holds of each key as
	// soon as it took over: a grant the old primary acknowledged and it
	// lacks was lost (on a Cluster, the keys of its slots).
	stored := func(addr string) { recordStored(c, redis.NewClient(&redis.Options{Addr: addr}), rec) }
	switch f {
	case FaultCrash:
		if rs.shards != nil {
			return takeover("cluster master crash", func() error { return rs.clusterCrash(d.Pick, d.Lag, stored) })
		}
		s := rs.servers[d.Pick]
		if c.Persist == "rdb" {
			// A snapshot shortly before the crash: the restart goes
			// back to a state some grants ago, whose records are still
			// within their TTL. The crash is aimed: it comes as soon as
			// workers were granted three locks the snapshot lacks
			// (within twice the TTL), which the first holders lose while
			// they hold them. Three, not one: a grant whose key the
			// snapshot has still held (its holder released it after
			// the snapshot) leaves the key held, after the restart,
			// until that holding's expiry, and the next token comes
			// from the clock then; one of three is likely a key the
			// snapshot has free.
			if err := snapshot(s.Addr); err != nil {
				return true, fmt.Errorf("verify: snapshot: %v", err)
			}
			rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: FaultSnapshot, Target: -1})
			rec.Record(Event{Op: OpNemesis, Type: OK, Fault: FaultSnapshot, Target: -1})
			grantsSince(ctx, rec, Now(), 3, d.Long)
		}
		down := d.Short
		if c.Persist == "rdb" {
			down = 0 // at once: the holder of the lost grant still holds it when the store is back
		}
		return true, crashRestart(c, s, f, down, nil, rec)
	case FaultPowerLoss:
		if c.Persist != "aof" || rs.shards != nil || rs.replica != nil {
			return false, nil
		}
		return true, powerLoss(ctx, c, rs.servers[d.Pick], min(d.Long, time.Second), rec)
	case FaultFailover:
		if rs.replica == nil {
			return false, nil
		}
		return takeover("failover", func() error { return failover(st, d.Lag, stored) })
	}
	return false, nil
}

// waitReplica waits until the primary at addr has a replica online.
func waitReplica(t testing.TB, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	testserver.Eventually(t, 10*time.Second, "the replica is in sync", func() bool {
		s, _ := rdb.Info(context.Background(), "replication").Result()
		return strings.Contains(s, "state=online")
	})
}

// snapshot saves an RDB snapshot of the server at addr and waits until it is
// written.
func snapshot(addr string) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	bg := context.Background()
	before, err := rdb.LastSave(bg).Result()
	if err != nil {
		return err
	}
	if err := rdb.Save(bg).Err(); err != nil {
		return err
	}
	if after, err := rdb.LastSave(bg).Result(); err != nil || after < before {
		return fmt.Errorf("no snapshot written (%v)", err)
	}
	return nil
}

// errNoReplica is the error of a failover that found no replica in sync.
var errNoReplica = errors.New("no replica in sync")

// failover cuts the replica's link (its replication user switched off and its
// connections killed), lets the primary take writes for lag, kills the primary,
// promotes the replica and points the proxy at it (with Sentinels: waits until
// they have promoted it); the old primary comes back empty as the new
// primary's replica.
func failover(st *store, lag time.Duration, promotedAt func(addr string)) error {
	rs := redisOf(st)
	p, r := rs.servers[0], rs.replica
	bg := context.Background()
	prdb := redis.NewClient(&redis.Options{Addr: p.Addr})
	defer prdb.Close()
	if s, _ := prdb.Info(bg, "replication").Result(); !strings.Contains(s, "state=online") {
		return errNoReplica // the replica of the last failover is still syncing
	}
	if err := prdb.Do(bg, "ACL", "SETUSER", "repl", "off").Err(); err != nil {
		return err
	}
	if err := prdb.Do(bg, "CLIENT", "KILL", "USER", "repl").Err(); err != nil {
		return err
	}
	time.Sleep(lag) // the primary grants what the replica will never see
	p.Stop()
	if rs.sentinels != nil {
		if err := promoted(rs.sentinels[0], r.Port); err != nil {
			return err
		}
	} else {
		rrdb := redis.NewClient(&redis.Options{Addr: r.Addr})
		defer rrdb.Close()
		if err := rrdb.Do(bg, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			return err
		}
		rs.proxy.SetTarget(r.Addr)
	}
	promotedAt(r.Addr)
	if err := p.Start(); err != nil {
		return err
	}
	if err := prdb.Do(bg, "REPLICAOF", "127.0.0.1", fmt.Sprint(r.Port)).Err(); err != nil {
		return err
	}
	rs.servers[0], rs.replica = r, p
	return nil
}

// promoted waits until the Sentinel s names the server on port as the primary.
func promoted(s *testserver.Sentinel, port int) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		a, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		if err == nil && len(a) == 2 && a[1] == fmt.Sprint(port) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Sentinels did not promote the replica on port %d: %v", port, err)
		case <-time.After(50 * time.Millisecond): // polling the Sentinel's view
		}
	}
}

// clusterCrash cuts the replica of shard i off from its master (its
// replication user switched off and its connections killed), lets the master
// take writes for lag, kills it, has the replica take its slots over at once
// (CLUSTER FAILOVER TAKEOVER) and starts the master again: it comes back
// empty and becomes the new master's replica. The grants of the lag are lost
// while their holders still hold them.
func (rs *redisStore) clusterCrash(i int, lag time.Duration, promotedAt func(addr string)) error {
	sh := rs.shards[i]
	if len(sh) < 2 {
		return errNoReplica
	}
	m, r := sh[0], sh[1]
	bg := context.Background()
	rrdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rrdb.Close()
	if s, _ := rrdb.Info(bg, "replication").Result(); !strings.Contains(s, "master_link_status:up") || !strings.Contains(s, "master_sync_in_progress:0") {
		return errNoReplica // the replica of the last crash is still syncing
	}
	mrdb := redis.NewClient(&redis.Options{Addr: m.Addr})
	defer mrdb.Close()
	if err := mrdb.Do(bg, "ACL", "SETUSER", "repl", "off").Err(); err != nil {
		return err
	}
	if err := mrdb.Do(bg, "CLIENT", "KILL", "USER", "repl").Err(); err != nil {
		return err
	}
	time.Sleep(lag) // the master grants what the replica will never see
	m.Stop()
	if err := rrdb.Do(bg, "CLUSTER", "FAILOVER", "TAKEOVER").Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	for {
		s, _ := rrdb.Info(ctx, "replication").Result()
		if strings.Contains(s, "role:master") {
			promotedAt(r.Addr)
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica on %s did not take over", r.Addr)
		case <-time.After(50 * time.Millisecond): // polling the cluster's failover
		}
	}
	if err := m.Start(); err != nil {
		return err
	}
	rs.shards[i] = append([]*testserver.Redis{r, m}, sh[2:]...)
	return nil
}

// sentinelTarget is the target of the failovers watchSentinels records: the
// store, as for the nemesis's (-1), under a key of their own.
const sentinelTarget = -2

// watchSentinels records every failover the Sentinels go through, those the
// nemesis asks for and those they start on their own (a primary slow to
// answer on a loaded host), as a failover fault: from the Sentinel s's +sdown
// of the primary until, after +switch-master, the old primary takes no writes
// (it is a replica, or down). A primary back (-sdown) with no switch closes
// the fault a failover timeout later: a failover may be under way still.
func watchSentinels(ctx context.Context, s *testserver.Sentinel, rec *Recorder) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr})
	defer sc.Close()
	ps := sc.PSubscribe(ctx, "+sdown", "-sdown", "+switch-master")
	defer ps.Close()
	open := false
	var back <-chan time.Time // the primary is back: the fault ends unless it switches
	event := func(typ string) {
		rec.Record(Event{Op: OpNemesis, Type: typ, Fault: FaultFailover, Target: sentinelTarget})
		open = typ == Invoke
	}
	for {
		select {
		case <-ctx.Done():
			if open {
				event(OK)
			}
			return
		case <-back:
			back = nil
			if open {
				event(OK)
			}
		case m, ok := <-ps.Channel():
			if !ok {
				return
			}
			f := strings.Fields(m.Payload)
			switch {
			case m.Channel == "+sdown" && len(f) > 0 && f[0] == "master" && !open:
				event(Invoke)
			case m.Channel == "-sdown" && len(f) > 0 && f[0] == "master" && open:
				back = time.After(10 * time.Second) // the Sentinels' failover-timeout
			case m.Channel == "+switch-master" && len(f) == 5:
				if !open {
					event(Invoke)
				}
				back = nil
				demoted(ctx, net.JoinHostPort(f[1], f[2]))
				event(OK)
			}
		}
	}
}

// demoted waits (10 s at most) until the server at addr is not a primary: a
// replica, or down.
func demoted(ctx context.Context, addr string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond): // polling the Sentinels' reconfiguration
		}
	}
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

// powerLoss emulates a power loss under the Redis server s, which logs its
// writes (AOF): it notes how far the log has got (recorded as a snapshot: the
// state the restart goes back to), lets the server take writes until a worker
// was granted a lock (lost at most), kills it, cuts the log back to where it
// was (what the disk had when the power went) and starts the server again at
// once, so that the holder of the lost grant still holds it when the store is
// back.
func powerLoss(ctx context.Context, c Config, s *testserver.Redis, lost time.Duration, rec *Recorder) error {
	path, err := aofTail(s.Addr)
	if err != nil {
		return fmt.Errorf("verify: power loss: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("verify: power loss: %v", err)
	}
	rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: FaultSnapshot, Target: -1})
	rec.Record(Event{Op: OpNemesis, Type: OK, Fault: FaultSnapshot, Target: -1})
	grantsSince(ctx, rec, Now(), 1, lost) // writes acknowledged, never on the disk
	return crashRestart(c, s, FaultPowerLoss, 0, func() error { return os.Truncate(path, fi.Size()) }, rec)
}

// crashRestart kills the Redis server s (fault f), runs cut (a power loss's
// cutting back of its log; nil: none), starts it again after down and
// records what it holds of each lock key then (OpStored), before the fault's
// end: the history shows what the restart lost.
func crashRestart(c Config, s *testserver.Redis, f string, down time.Duration, cut func() error, rec *Recorder) error {
	rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
	s.Stop()
	if cut != nil {
		if err := cut(); err != nil {
			return fmt.Errorf("verify: %s: cutting the log back: %v", f, err)
		}
	}
	time.Sleep(down)
	if err := s.Start(); err != nil {
		return fmt.Errorf("verify: restarting the lock store: %v", err)
	}
	recordStored(c, redis.NewClient(&redis.Options{Addr: s.Addr}), rec)
	rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
	return nil
}

// recordStored records what the Redis store that rdb (closed on return)
// reaches holds of each of c's lock keys (OpStored), read through
// redislock's Inspector.
func recordStored(c Config, rdb redis.UniversalClient, rec *Recorder) {
	defer rdb.Close()
	in, err := redislock.NewInspector(rdb)
	if err != nil {
		return
	}
	for _, key := range c.Spec.Keys {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := in.Inspect(ctx, key)
		cancel()
		if err == nil {
			rec.Record(Event{Op: OpStored, Key: key, Token: info.Token, Owner: info.Owner})
		}
	}
}

// aofTail returns the path of the file that the Redis server at addr appends
// its writes to: the last incremental file its AOF manifest lists.
func aofTail(addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	bg := context.Background()
	cfg, err := rdb.ConfigGet(bg, "*").Result()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cfg["dir"], cfg["appenddirname"])
	manifest, err := os.ReadFile(filepath.Join(dir, cfg["appendfilename"]+".manifest"))
	if err != nil {
		return "", err
	}
	name := ""
	for _, line := range strings.Split(string(manifest), "\n") {
		f := strings.Fields(line)
		if len(f) >= 6 && f[0] == "file" && f[4] == "type" && f[5] == "i" {
			name = f[1]
		}
	}
	if name == "" {
		return "", fmt.Errorf("no incremental file in the AOF manifest of %s: %q", addr, manifest)
	}
	return filepath.Join(dir, name), nil
}

// grantsSince waits, within d at most (or until ctx ends), until the history
// that rec writes to shows n grants completed after t (on Now's clock): the
// end of each worker's file is read every 10 ms.
func grantsSince(ctx context.Context, rec *Recorder, t int64, n int, d time.Duration) {
	dir := filepath.Dir(rec.f.Name())
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		files, _ := filepath.Glob(filepath.Join(dir, "w*.jsonl"))
		seen := 0
		for _, name := range files {
			seen += granted(name, t)
		}
		if seen >= n {
			return
		}
		if !wait(ctx, 10*time.Millisecond) { // polling the workers' files
			return
		}
	}
}

// granted counts the grants completed after t that the last few KB of the
// history file name show.
func granted(name string, t int64) int {
	f, err := os.Open(name)
	if err != nil {
		return 0
	}
	defer f.Close()
	const tail = 8 << 10
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	off := max(fi.Size()-tail, 0)
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	seen := 0
	for _, line := range bytes.Split(b[:n], []byte("\n")) {
		var e Event
		if json.Unmarshal(line, &e) == nil && e.Op == OpAcquire && e.Type == OK && e.T > t {
			seen++
		}
	}
	return seen
}
