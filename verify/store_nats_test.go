package verify

import (
	"context"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/natslock"
	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS: one server with JetStream (sync on every write) in the test process,
// behind a proxy; the bucket made by natslock's Migrate.
func init() {
	registerBackend(&backend{
		name:      "nats",
		faults:    []string{FaultForce},
		start:     startNATS,
		locker:    natsLocker,
		inspector: natsInspector,
		leftover:  natsLeftover,
		exact:     true, // no fault excuses two holders
	})
}

// startNATS starts the server and its bucket; the workers dial its proxy.
func startNATS(t testing.TB, _ Config) *store {
	s, err := natstest.Start(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	d, closeDriver, err := natsDriver(s.URL)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = d.Migrate(ctx)
		cancel()
		closeDriver()
	}
	if err != nil {
		t.Fatal(err)
	}
	st := &store{own: s, nodes: 1}
	st.addrs = []string{"nats://" + st.proxyTo(t, s.URL[len("nats://"):]).Addr()}
	return st
}

// natsDriver returns natslock's Driver over a connection of its own to url,
// and the function that closes both. A connection that cannot be made now
// (a black-holed proxy) is made in the background: the Driver's calls are
// unavailable meanwhile.
func natsDriver(url string) (*natslock.Driver, func(), error) {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		return nil, func() {}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, func() {}, err
	}
	d, err := natslock.NewDriver(js, natslock.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		nc.Close()
		return nil, func() {}, err
	}
	return d, func() { d.Close(); nc.Close() }, nil
}

// natsLocker returns natslock's Client on s's server.
func natsLocker(s Spec) (dlock.Locker, func(), error) {
	d, closeAll, err := natsDriver(s.Lock[0])
	if err != nil {
		return nil, closeAll, err
	}
	lk, err := natslock.NewClient(d)
	return lk, closeAll, err
}

// natsInspector returns natslock's Driver straight to the server.
func natsInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	d, closeAll, err := natsDriver(st.own.(*natstest.Server).URL)
	return d, closeAll, err
}

// natsLeftover lists the keys of the bucket still held.
func natsLeftover(t testing.TB, st *store) []string {
	d, closeAll, err := natsDriver(st.own.(*natstest.Server).URL)
	if err != nil {
		t.Errorf("verify: connecting to NATS: %v", err)
		return nil
	}
	defer closeAll()
	infos, err := driver.List(context.Background(), d, "*")
	if err != nil {
		t.Errorf("verify: listing the bucket: %v", err)
	}
	var left []string
	for _, in := range infos {
		left = append(left, in.Key)
	}
	return left
}

// noPushNATS is the natsnopush variant's lock: natslock's Driver whose grants
// carry no Lost, so that a holder learns of a force-unlock at its next
// renewal, not from its watch of the key.
func noPushNATS(s Spec) (dlock.Locker, func(), error) {
	d, closeAll, err := natsDriver(s.Lock[0])
	if err != nil {
		return nil, closeAll, err
	}
	lk, err := dlock.NewClient(noPush{d})
	return lk, closeAll, err
}

type noPush struct{ *natslock.Driver }

// Acquire drops the grant's loss signal.
func (n noPush) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	g, err := n.Driver.Acquire(ctx, r)
	g.Lost = nil
	return g, err
}
