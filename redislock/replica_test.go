package redislock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// noSyncDelay makes a master serve a new replica at once (the default waits 5s
// for more replicas to share a diskless sync).
var noSyncDelay = []string{"--repl-diskless-sync-delay", "0"}

// startReplica starts a replica of master and waits until it is in sync.
func startReplica(t testing.TB, master *testserver.Redis) *testserver.Redis {
	t.Helper()
	return startReplicaOf(t, master.Addr)
}

// startReplicaOf starts a replica of the master at addr (possibly a proxy to
// it) and waits until it is in sync.
func startReplicaOf(t testing.TB, addr string) *testserver.Redis {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	replica := testserver.StartRedis(t, "--replicaof", host, port)
	rdb, mrdb := newRDB(t, replica.Addr), newRDB(t, addr)
	for i := 0; ; i++ {
		info, _ := rdb.Info(context.Background(), "replication").Result()
		// In sync on both sides: the master counts it in WAIT only once it
		// sees it online.
		minfo, _ := mrdb.Info(context.Background(), "replication").Result()
		if strings.Contains(info, "master_link_status:up") && strings.Contains(minfo, "state=online") {
			return replica
		}
		if i == 1000 {
			t.Fatalf("replica %s never in sync: %s", replica.Addr, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ackClient(t testing.TB, addr string, n int, timeout time.Duration) *redislock.Client {
	t.Helper()
	d, err := redislock.NewDriver(newRDB(t, addr), redislock.WithReplicaAck(n, timeout))
	if err != nil {
		t.Fatal(err)
	}
	c, err := redislock.NewClient(d)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestReplicaAck: with WithReplicaAck a lock is granted only once a replica has
// its write; with the replica stopped, the attempt fails and leaves nothing.
func TestReplicaAck(t *testing.T) {
	master := testserver.StartRedis(t, noSyncDelay...)
	replica := startReplica(t, master)
	c := ackClient(t, master.Addr, 1, 200*time.Millisecond)
	// A replica starved of CPU on a loaded machine can take a while to
	// acknowledge: give the in-sync case room.
	inSync := ackClient(t, master.Addr, 1, 5*time.Second)
	ctx := context.Background()
	key := dlocktest.Key(t)
	l, err := inSync.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock with a replica in sync: %v", err)
	}
	if n, _ := newRDB(t, replica.Addr).Exists(ctx, redislock.LockKey(key)).Result(); n != 1 {
		t.Errorf("granted lock not on the replica")
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	if err := replica.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Signal(syscall.SIGCONT) }()
	begin := time.Now()
	_, err = c.TryLock(ctx, key)
	if !errors.Is(err, dlock.ErrUnavailable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
		t.Fatalf("TryLock with the replica stopped: %v, want ErrUnavailable", err)
	}
	if el := time.Since(begin); el < 200*time.Millisecond || el > 5*time.Second {
		t.Errorf("TryLock with the replica stopped returned after %v", el)
	}
	if n, _ := newRDB(t, master.Addr).Exists(ctx, redislock.LockKey(key)).Result(); n != 0 {
		t.Errorf("unacknowledged lock left on the master")
	}

	for name, o := range map[string]redislock.Option{
		"n 0":         redislock.WithReplicaAck(0, time.Second),
		"timeout 0":   redislock.WithReplicaAck(1, 0),
		"nil option":  nil,
		"cluster rdb": redislock.WithReplicaAck(1, time.Second),
	} {
		var rdb redis.UniversalClient = newRDB(t, master.Addr)
		if name == "cluster rdb" {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{master.Addr}})
			defer cc.Close()
			rdb = cc
		}
		if _, err := redislock.NewDriver(rdb, o); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("NewDriver with %s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestSentinelFailoverLosesUnreplicatedLock shows the hazard of asynchronous
// replication for real: a lock taken on the master, the master killed before the
// write reached its replica, the replica promoted by the sentinels, and a second
// client takes the same lock while the first still holds its lease. The second
// holder's token is greater, although the replica's record is that of the
// release before the lost grant, so a fenced resource refuses the first one's
// write.
func TestSentinelFailoverLosesUnreplicatedLock(t *testing.T) {
	if testing.Short() {
		t.Skip("a Sentinel failover takes seconds")
	}
	master := testserver.StartRedis(t, noSyncDelay...)
	// The replica reads the master through a proxy that can drop the stream: a
	// stopped replica would still find the write in its socket buffer.
	link := testproxy.Start(t, master.Addr)
	replica := startReplicaOf(t, link.Addr)
	sentinels := testserver.StartSentinels(t, master, 3)
	var addrs []string
	for _, s := range sentinels {
		addrs = append(addrs, s.Addr)
	}
	failover := func() *redis.Client {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: sentinels[0].MasterName, SentinelAddrs: addrs, ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { _ = rdb.Close() })
		return rdb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := redislock.New(failover())
	if err != nil {
		t.Fatal(err)
	}
	key := dlocktest.Key(t)

	// A holding taken and released before the cut: the replica has its released
	// record, whose token the grant it never sees continues.
	l0, err := first.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l0.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := newRDB(t, master.Addr).Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1: %d replicas, %v", n, err)
	}
	link.Blackhole(testproxy.Downstream, true) // the write will not replicate
	la, err := first.TryLock(ctx, key, dlock.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	master.Stop()
	sc := redis.NewSentinelClient(&redis.Options{Addr: addrs[0]})
	defer sc.Close()
	for {
		addr, err := sc.GetMasterAddrByName(ctx, sentinels[0].MasterName).Result()
		if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(replica.Port) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the sentinels never promoted the replica: %v %v", addr, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	second, err := redislock.New(failover())
	if err != nil {
		t.Fatal(err)
	}
	lb, err := second.Lock(ctx, key, dlock.WithTTL(30*time.Second), dlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("Lock on the promoted replica: %v (the hazard did not show)", err)
	}
	if err := la.Err(); err != nil {
		// The first holder's loss subscription, subscribed again on the
		// promoted replica, checked its holding and found it gone: it was
		// told, which is better; the tokens still have to order the two.
		if !errors.Is(err, dlock.ErrLockLost) {
			t.Fatalf("first lease ended: %v, not a loss", err)
		}
		t.Logf("the first holder was told of its loss after the failover: %v", err)
	}
	t.Logf("two holders after the failover: token %d (lost with the old master) and %d", la.Token(), lb.Token())
	if lb.Token() <= la.Token() {
		t.Fatalf("token after the failover %d not above %d", lb.Token(), la.Token())
	}
	f, err := redislock.NewFence(failover())
	if err != nil {
		t.Fatal(err)
	}
	resource := key + ":resource"
	if err := f.Set(ctx, lb, resource, "second", 0); err != nil {
		t.Fatalf("second holder's fenced write: %v", err)
	}
	if err := f.Set(ctx, la, resource, "first", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("first holder's fenced write: %v, want ErrStaleToken", err)
	}
	// The first holder learns of the loss at its next renewal.
	if err := la.Extend(ctx, 30*time.Second); !errors.Is(err, dlock.ErrLockLost) {
		t.Errorf("first holder's Extend: %v, want ErrLockLost", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReplicaAck measures what WithReplicaAck(1, ...) adds to a lock and
// unlock cycle, with the replica on the same host.
func BenchmarkReplicaAck(b *testing.B) {
	master := testserver.StartRedis(b, noSyncDelay...)
	startReplica(b, master)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		c    *redislock.Client
	}{
		{"none", func() *redislock.Client {
			c, err := redislock.New(newRDB(b, master.Addr))
			if err != nil {
				b.Fatal(err)
			}
			return c
		}()},
		{"ack1", ackClient(b, master.Addr, 1, time.Second)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			key := dlocktest.Key(b)
			for b.Loop() {
				l, err := tc.c.TryLock(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
