package verify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcd: a cluster of three members, each behind a proxy for the workers and
// one for its peers (the partition's).
func init() {
	registerBackend(&backend{
		name:      "etcd",
		faults:    []string{FaultCrash, FaultPartition, FaultForce},
		start:     startEtcd,
		locker:    etcdLocker,
		inspector: etcdInspector,
		sync:      etcdSync,
		leftover:  etcdLeftover,
		fault:     etcdFault,
		// The mark of an abandoned acquisition lives its TTL plus the
		// request timeout (in whole seconds), and a leader change renews
		// every lease (etcd refreshes them on election).
		grace: func(Spec) time.Duration { return etcdlock.DefaultRequestTimeout + 2*time.Second },
		exact: true, // etcd keeps every write of a quorum on disk: no fault excuses two holders
	})
}

// etcdStore is the etcd backend's store.own.
type etcdStore struct {
	cluster *testserver.EtcdCluster
	peers   []*Proxy // between the members, one per member
}

// startEtcd starts the cluster, its members' peer traffic through proxies.
func startEtcd(t testing.TB, _ Config) *store {
	es := &etcdStore{}
	st := &store{own: es}
	es.cluster = testserver.StartEtcdClusterWith(t, 3, testserver.EtcdClusterOptions{
		PeerAddr: func(i int, listen string) (string, error) {
			px, err := NewProxy(listen)
			if err != nil {
				return "", err
			}
			t.Cleanup(px.Close)
			es.peers = append(es.peers[:i], px) // a start tried again replaces the last try's
			return px.Addr(), nil
		}})
	st.addrs, st.nodes = es.cluster.Endpoints(), len(es.peers)
	st.proxify(t)
	return st
}

// etcdClient returns a client of endpoints.
func etcdClient(endpoints []string, dial time.Duration) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: dial, Logger: zap.NewNop()})
}

// etcdLocker returns etcdlock's Client on s's endpoints.
func etcdLocker(s Spec) (dlock.Locker, func(), error) {
	cli, err := etcdClient(s.Lock, 2*time.Second)
	if err != nil {
		return nil, func() {}, err
	}
	lk, err := etcdlock.New(cli)
	return lk, func() { cli.Close() }, err
}

// etcdSync returns etcdlock's latch and barrier driver on s's endpoints.
func etcdSync(s SyncSpec) (driver.SyncDriver, func(), error) {
	cli, err := etcdClient(s.Addr, 2*time.Second)
	if err != nil {
		return nil, func() {}, err
	}
	d, err := etcdlock.NewDriver(cli)
	return d, func() { cli.Close() }, err
}

// etcdInspector returns etcdlock's Driver over a client of its own, straight
// to the members.
func etcdInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	cli, err := etcdClient(st.own.(*etcdStore).cluster.Endpoints(), 2*time.Second)
	if err != nil {
		return nil, func() {}, err
	}
	d, err := etcdlock.NewDriver(cli)
	if err != nil {
		cli.Close()
		return nil, func() {}, err
	}
	return d, func() { cli.Close() }, nil
}

// etcdFault injects etcd's faults: the leader killed and started again (the
// others elect one meanwhile, and it rejoins from its WAL), and a member cut
// off from its peers and the workers.
func etcdFault(ctx context.Context, _ Config, st *store, f string, d draws, rec *Recorder) (bool, error) {
	es := st.own.(*etcdStore)
	switch f {
	case FaultCrash:
		lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := es.cluster.Leader(lctx)
		lcancel()
		if err != nil {
			return false, nil
		}
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		l.Stop()
		time.Sleep(d.Long)
		if err := l.Restart(); err != nil {
			return true, fmt.Errorf("verify: restarting the etcd leader: %v", err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
		return true, nil
	case FaultPartition:
		e := Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1, Nodes: []int{d.Pick}}
		rec.Record(e)
		held := st.proxies[d.Pick].Held()
		es.peers[d.Pick].SetBlackhole(true)
		st.proxies[d.Pick].SetBlackhole(true)
		time.Sleep(d.Hole) // the member is cut off; healed below
		es.peers[d.Pick].Heal()
		st.proxies[d.Pick].Heal()
		// The workers' traffic with the member that the cut held: their
		// requests, keep-alives and watches to it, and its replies.
		e.Type, e.Cut = OK, st.proxies[d.Pick].Held()-held
		rec.Record(e)
		return true, nil
	}
	return false, nil
}

// etcdLeftover lists the keys and leases on the etcd cluster.
func etcdLeftover(t testing.TB, st *store) []string {
	var left []string
	bg := context.Background()
	cli, err := etcdClient(st.own.(*etcdStore).cluster.Endpoints(), 5*time.Second)
	if err != nil {
		t.Errorf("verify: etcd client: %v", err)
		return nil
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Errorf("verify: listing etcd: %v", err)
		return nil
	}
	for _, kv := range resp.Kvs {
		if kv.Lease == 0 && strings.HasPrefix(string(kv.Key), etcdlock.Prefix+"delay/") {
			continue // a lock-delay marker that no acquisition has seen yet: kept by design
		}
		left = append(left, string(kv.Key))
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Errorf("verify: listing etcd leases: %v", err)
		return left
	}
	for _, l := range ls.Leases {
		left = append(left, fmt.Sprintf("lease %x", l.ID))
	}
	return left
}
