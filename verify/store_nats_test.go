package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
// behind a proxy; the bucket made by natslock's Migrate. A power loss loses
// nothing: every write the server acknowledged was on its disk.
func init() {
	b := natsServerBackend("nats")
	b.exact = true // no fault excuses two holders
	registerBackend(b)
}

// NATS with the default sync (every two minutes): a power loss loses the
// writes the server acknowledged since its disk last had them, grants and
// releases, and their revisions are handed out again.
func init() {
	b := natsServerBackend("nats-default-sync")
	b.tokensBack = true
	registerBackend(b)
}

// natsServerBackend is the backend named name on one NATS server (see
// startNATS).
func natsServerBackend(name string) *backend {
	return &backend{
		name:      name,
		faults:    []string{FaultPowerLoss, FaultForce},
		start:     startNATS,
		locker:    natsLocker,
		inspector: natsInspector,
		leftover:  natsLeftover,
		fault:     natsFault,
	}
}

// NATS's cluster: three servers with JetStream (sync on every write), each
// behind a proxy, the bucket with three replicas; a crash shuts the bucket's
// stream leader down and starts it again after half to twice the TTL, while
// the other two elect a leader among themselves and serve on.
func init() {
	registerBackend(&backend{
		name:      "nats-3",
		faults:    []string{FaultCrash, FaultForce},
		start:     startNATSCluster,
		locker:    natsLocker,
		inspector: natsInspector,
		leftover:  natsLeftover,
		fault:     natsFault,
		exact:     true, // every acknowledged write on a majority's disk: no fault excuses two holders
	})
}

// startNATSCluster starts the cluster and its bucket of three replicas; the
// workers dial the servers' proxies.
func startNATSCluster(t testing.TB, _ Config) *store {
	cl, err := natstest.StartCluster(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Shutdown)
	st := &store{own: cl, nodes: len(cl.Servers)}
	var merr error
	for range 50 { // JetStream elects its meta leader shortly after the start
		if merr = migrateNATS(cl.URL(), len(cl.Servers)); merr == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if merr != nil {
		t.Fatal(merr)
	}
	for _, s := range cl.Servers {
		st.addrs = append(st.addrs, "nats://"+st.proxyTo(t, strings.TrimPrefix(s.URL, "nats://")).Addr())
	}
	return st
}

// migrateNATS makes the bucket, with replicas, on the servers at url.
func migrateNATS(url string, replicas int) error {
	d, closeDriver, err := natsDriver(url, nil, natslock.WithReplicas(replicas))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = d.Migrate(ctx)
		cancel()
		closeDriver()
	}
	return err
}

// natsURL returns the client URLs of st's servers, not through the proxies.
func natsURL(st *store) string {
	if cl, ok := st.own.(*natstest.Cluster); ok {
		return cl.URL()
	}
	return st.own.(*natsServer).URL
}

// natsFault injects the cluster's crash: the server that leads the
// bucket's stream (a member drawn at random when no server names one) shut
// down and started again on the same store after d.Long; and a single
// server's power loss (see powerLossNATS).
func natsFault(ctx context.Context, _ Config, st *store, f string, d draws, rec *Recorder) (bool, error) {
	if s, ok := st.own.(*natsServer); ok && f == FaultPowerLoss {
		return true, powerLossNATS(ctx, s, st, min(d.Long, time.Second), rec)
	}
	cl, ok := st.own.(*natstest.Cluster)
	if f != FaultCrash || !ok {
		return false, nil
	}
	s := cl.Servers[d.Pick]
	if i := streamLeader(ctx, cl); i >= 0 {
		s = cl.Servers[i]
	}
	closes := serverCloses(st.proxies)
	rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: f, Target: -1})
	s.Shutdown()
	time.Sleep(d.Long) // the others elect a leader meanwhile
	if err := s.Restart(); err != nil {
		return true, fmt.Errorf("verify: restarting the NATS server %s: %v", s.Name(), err)
	}
	// The workers' connections the servers closed meanwhile: those of the
	// server shut down.
	rec.Record(Event{Op: OpNemesis, Type: OK, Fault: f, Target: -1, Cut: serverCloses(st.proxies) - closes})
	return true, nil
}

// powerLossNATS emulates a power loss under s. With the default sync, what
// the disk has is what the server wrote by its last sync: a copy of its store
// directory taken while it runs (recorded as a snapshot) stands for it; the
// server takes writes on until a worker was granted a lock (lost at most),
// is shut down, and starts again at once from the copy, having lost every
// write since, so that the holder of the lost grant still holds it when the
// store is back, and the revisions of the writes lost are handed out again.
// With sync on every write, the disk has every write the server acknowledged
// when the power goes: it starts again from its store directory as it was
// when it stopped.
func powerLossNATS(ctx context.Context, s *natsServer, st *store, lost time.Duration, rec *Recorder) error {
	snap := s.dir + ".snapshot"
	if !s.syncAlways {
		if err := os.RemoveAll(snap); err != nil {
			return fmt.Errorf("verify: power loss: %v", err)
		}
		if err := s.Snapshot(snap); err != nil {
			return fmt.Errorf("verify: power loss: copying the store: %v", err)
		}
		rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: FaultSnapshot, Target: -1})
		rec.Record(Event{Op: OpNemesis, Type: OK, Fault: FaultSnapshot, Target: -1})
		grantsSince(ctx, rec, Now(), 1, lost) // writes acknowledged, never on the disk
	}
	before := lastRevision(ctx, s.URL)
	closes := serverCloses(st.proxies)
	rec.Record(Event{Op: OpNemesis, Type: Invoke, Fault: FaultPowerLoss, Target: -1})
	restart := s.Restart // it stops the server first
	if !s.syncAlways {
		restart = func() error { return s.PowerLoss(snap) }
	}
	if err := restart(); err != nil {
		return fmt.Errorf("verify: power loss: restarting the NATS server: %v", err)
	}
	after := lastRevision(ctx, s.URL)
	rec.Record(Event{Op: OpNemesis, Type: OK, Fault: FaultPowerLoss, Target: -1, Cut: serverCloses(st.proxies) - closes})
	if after < before {
		s.t.Logf("power loss: the bucket's last revision went back from %d to %d: revisions %d to %d are handed out again", before, after, after+1, before)
	} else {
		s.t.Logf("power loss: the bucket's last revision %d before, %d after: nothing lost", before, after)
	}
	return nil
}

// lastRevision returns the last revision (stream sequence) of the bucket on
// the server at url (0: none known).
func lastRevision(ctx context.Context, url string) uint64 {
	nc, err := nats.Connect(url, nats.Timeout(time.Second))
	if err != nil {
		return 0
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "KV_"+natslock.DefaultBucket)
	if err != nil {
		return 0
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.LastSeq
}

// streamLeader returns the index in cl of the server that leads the
// bucket's stream, as JetStream's stream information names it (-1: none
// found).
func streamLeader(ctx context.Context, cl *natstest.Cluster) int {
	nc, err := nats.Connect(cl.URL(), nats.Timeout(time.Second))
	if err != nil {
		return -1
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, "KV_"+natslock.DefaultBucket)
	if err != nil {
		return -1
	}
	info, err := stream.Info(ctx)
	if err != nil || info.Cluster == nil {
		return -1
	}
	for i, s := range cl.Servers {
		if s.Name() == info.Cluster.Leader {
			return i
		}
	}
	return -1
}

// natsServer is a single server of the tests, with what a power loss needs.
type natsServer struct {
	*natstest.Server
	t          testing.TB
	dir        string // its store directory
	syncAlways bool
}

// startNATS starts the server and its bucket; the workers dial its proxy.
func startNATS(t testing.TB, c Config) *store {
	dir := t.TempDir()
	syncAlways := c.Spec.Backend != "nats-default-sync"
	s, err := natstest.Start(dir, natstest.Options{SyncAlways: syncAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Shutdown)
	if err := migrateNATS(s.URL, 1); err != nil {
		t.Fatal(err)
	}
	// natstest.Start keeps the server's store under dir/n1.
	st := &store{own: &natsServer{Server: s, t: t, dir: filepath.Join(dir, "n1"), syncAlways: syncAlways}, nodes: 1}
	st.addrs = []string{"nats://" + st.proxyTo(t, s.URL[len("nats://"):]).Addr()}
	return st
}

// natsDriver returns natslock's Driver with opts over a connection of its own
// (with copts) to url (servers' URLs, comma separated: the connection goes to one of them
// and moves to another when it breaks, never to one the servers advertise,
// which the proxies would not stand before), and the function that closes
// both. A connection that cannot be made now (a black-holed proxy) is made
// in the background: the Driver's calls are unavailable meanwhile.
func natsDriver(url string, copts []nats.Option, opts ...natslock.Option) (*natslock.Driver, func(), error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(time.Second), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond), nats.IgnoreDiscoveredServers()}, copts...)...)
	if err != nil {
		return nil, func() {}, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, func() {}, err
	}
	d, err := natslock.NewDriver(js, append([]natslock.Option{natslock.WithRequestTimeout(500 * time.Millisecond)}, opts...)...)
	if err != nil {
		nc.Close()
		return nil, func() {}, err
	}
	return d, func() { d.Close(); nc.Close() }, nil
}

// natsLocker returns natslock's Client on s's servers: worker i connects to
// server i first (modulo their number), so that each server of a cluster
// has workers on it, and moves on in the servers' order when it breaks.
func natsLocker(s Spec) (dlock.Locker, func(), error) {
	n := s.Proc % len(s.Lock)
	d, closeAll, err := natsDriver(strings.Join(append(s.Lock[n:], s.Lock[:n]...), ","), []nats.Option{nats.DontRandomize()})
	if err != nil {
		return nil, closeAll, err
	}
	lk, err := natslock.NewClient(d)
	return lk, closeAll, err
}

// natsInspector returns natslock's Driver straight to the servers.
func natsInspector(_ Config, st *store) (driver.Inspector, func(), error) {
	d, closeAll, err := natsDriver(natsURL(st), nil)
	return d, closeAll, err
}

// natsLeftover lists the keys of the bucket still held.
func natsLeftover(t testing.TB, st *store) []string {
	d, closeAll, err := natsDriver(natsURL(st), nil)
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
	d, closeAll, err := natsDriver(s.Lock[0], nil)
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
