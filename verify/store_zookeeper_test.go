package verify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/zklock"
	"github.com/go-zookeeper/zk"
)

// ZooKeeper: one server behind a proxy; the TTL is the session timeout.
func init() {
	registerBackend(&backend{
		name:      "zookeeper",
		faults:    []string{FaultCrash, FaultExpire, FaultForce},
		start:     startZooKeeper,
		locker:    zkLocker,
		inspector: zkInspector,
		leftover:  zkLeftover,
		fault:     zkFault,
		exact:     true, // no fault excuses two holders
	})
}

// ZooKeeper's ensemble: three servers, each behind a proxy; a crash kills the
// leader, and the other two elect one of theirs while it is down.
func init() {
	registerBackend(&backend{
		name:      "zookeeper-3",
		faults:    []string{FaultCrash, FaultExpire, FaultForce},
		start:     startZooKeeperEnsemble,
		locker:    zkLocker,
		inspector: zkInspector,
		leftover:  zkLeftover,
		fault:     zkFault,
		exact:     true, // every write on a quorum's disk: no fault excuses two holders
	})
}

// startZooKeeperEnsemble starts the ensemble, each server behind a proxy.
func startZooKeeperEnsemble(t testing.TB, _ Config) *store {
	e := testserver.StartZooKeeperEnsemble(t, 3)
	st := &store{own: e, addrs: e.Addrs(), nodes: len(e.Members)}
	st.proxify(t)
	return st
}

// zkAddrs returns the client addresses of st's servers, not through the
// proxies.
func zkAddrs(st *store) []string {
	if e, ok := st.own.(*testserver.ZooKeeperEnsemble); ok {
		return e.Addrs()
	}
	return []string{st.own.(*testserver.ZooKeeper).Addr}
}

// startZooKeeper starts the server, behind a proxy.
func startZooKeeper(t testing.TB, _ Config) *store {
	z := testserver.StartZooKeeper(t)
	st := &store{own: z, addrs: []string{z.Addr}, nodes: 1}
	st.proxify(t)
	return st
}

// zkLocker returns zklock's Client on s's server, its session timeout the TTL.
func zkLocker(s Spec) (dlock.Locker, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := zklock.NewDriver(ctx, s.Lock, zklock.WithSessionTimeout(s.TTL), zklock.WithLogger(func(string, ...any) {}))
	if err != nil {
		return nil, func() {}, err
	}
	lk, err := zklock.NewClient(d)
	return lk, func() { d.Close() }, err
}

// zkInspector returns zklock's Driver over a session of its own, straight to
// the server.
func zkInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := zklock.NewDriver(ctx, zkAddrs(st), zklock.WithLogger(func(string, ...any) {}))
	if err != nil {
		return nil, func() {}, err
	}
	return d, func() { d.Close() }, nil
}

// zkFault injects ZooKeeper's faults: the server (an ensemble's leader)
// killed and started again, and the workers' connections black-holed past
// the session timeout.
func zkFault(ctx context.Context, _ Config, st *store, f string, d draws, rec *Recorder) (bool, error) {
	switch f {
	case FaultCrash:
		var z *testserver.ZooKeeper
		down := d.Short
		switch own := st.own.(type) {
		case *testserver.ZooKeeper:
			z = own
		case *testserver.ZooKeeperEnsemble:
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			l, err := own.Leader(lctx)
			lcancel()
			if err != nil {
				return false, nil
			}
			z, down = l, d.Long // the others elect a leader meanwhile
		}
		closes := serverCloses(st.proxies)
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		z.Stop()
		time.Sleep(down)
		if err := z.Start(); err != nil {
			return true, fmt.Errorf("verify: restarting ZooKeeper: %v", err)
		}
		// The workers' connections the servers closed meanwhile: the
		// killed one's, and those of the others as they left the dead
		// leader to elect another.
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1, Cut: serverCloses(st.proxies) - closes})
		return true, nil
	case FaultExpire:
		e := Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1, Nodes: d.Cut}
		rec.Record(e)
		for _, p := range st.proxies {
			p.SetBlackhole(true)
		}
		wait(ctx, d.Expire) // past the session timeout; healed below
		for _, p := range st.proxies {
			p.Heal()
		}
		e.Type = OK
		rec.Record(e)
		return true, nil
	}
	return false, nil
}

// zkLeftover lists the ephemeral znodes (holdings and queue entries) left under
// the locks' root.
func zkLeftover(t testing.TB, st *store) []string {
	conn, _, err := zk.Connect(zkAddrs(st), 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Errorf("verify: connecting to ZooKeeper: %v", err)
		return nil
	}
	defer conn.Close()
	var left []string
	var walk func(path string)
	walk = func(path string) {
		kids, _, err := conn.Children(path)
		if err != nil {
			return
		}
		for _, k := range kids {
			p := path + "/" + k
			if _, stat, err := conn.Get(p); err == nil && stat.EphemeralOwner != 0 {
				left = append(left, p)
			}
			walk(p)
		}
	}
	walk(zklock.DefaultRoot)
	return left
}

// serverCloses adds up the connections the servers behind ps closed.
func serverCloses(ps []*Proxy) int {
	n := 0
	for _, p := range ps {
		n += p.ServerCloses()
	}
	return n
}
