package natslock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// TestClusterLeaderRestart: on a three-node cluster with a bucket of three
// replicas, clients connected to different servers exclude each other, and
// after the stream's leader is stopped and started again a new holding's
// token is above every earlier one.
func TestClusterLeaderRestart(t *testing.T) {
	cl := theCluster(t)
	var cs []*Client
	var ds []*Driver
	for _, s := range cl.Servers {
		d := newDriverURL(t, s.URL, WithReplicas(3))
		c, err := NewClient(d)
		if err != nil {
			t.Fatal(err)
		}
		cs, ds = append(cs, c), append(ds, d)
	}
	key := dlocktest.Key(t)
	ctx := ctxT(t, 60*time.Second)
	l, err := cs[0].TryLock(ctx, key, dlock.WithTTL(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs[1:] {
		if _, err := c.TryLock(ctx, key); !dlockBusy(err) {
			t.Fatalf("second holder on another server: %v", err)
		}
	}
	last := l.Token()
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	info, err := ds[0].opened.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil {
		t.Fatalf("bucket replicas %d, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	leader := -1
	for i, s := range cl.Servers {
		if s.Name() == info.Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("stream leader %q not among the servers", info.Cluster.Leader)
	}
	if err := cl.Servers[leader].Restart(); err != nil {
		t.Fatal(err)
	}
	c := cs[(leader+1)%len(cs)]
	var got *dlock.Lease
	for got == nil && ctx.Err() == nil {
		// A new leader is elected within a few seconds; until then the
		// store is unavailable.
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		got, err = c.Lock(lctx, key, dlock.WithTTL(5*time.Second))
		cancel()
	}
	if got == nil {
		t.Fatalf("no lock after the leader's restart: %v", err)
	}
	if got.Token() <= last {
		t.Errorf("token %d after the restart, want above %d", got.Token(), last)
	}
	_ = got.Unlock(ctx)
}

func dlockBusy(err error) bool { return errors.Is(err, dlock.ErrNotObtained) }
