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
	d, err := zklock.NewDriver(ctx, []string{st.own.(*testserver.ZooKeeper).Addr}, zklock.WithLogger(func(string, ...any) {}))
	if err != nil {
		return nil, func() {}, err
	}
	return d, func() { d.Close() }, nil
}

// zkFault injects ZooKeeper's faults: the server stopped and started again,
// and the workers' connections black-holed past the session timeout.
func zkFault(ctx context.Context, _ Config, st *store, f string, d draws, rec *Recorder) (bool, error) {
	z := st.own.(*testserver.ZooKeeper)
	switch f {
	case FaultCrash:
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
		z.Stop()
		time.Sleep(d.Short)
		if err := z.Start(); err != nil {
			return true, fmt.Errorf("verify: restarting ZooKeeper: %v", err)
		}
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1})
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
	conn, _, err := zk.Connect([]string{st.own.(*testserver.ZooKeeper).Addr}, 5*time.Second, zk.WithLogInfo(false))
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
