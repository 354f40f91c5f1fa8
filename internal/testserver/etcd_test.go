package testserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEtcdMissingBinaryIsNamed(t *testing.T) {
	t.Setenv("DLOCK_ETCD", "etcd-that-does-not-exist")
	_, err := NewEtcd(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "etcd-that-does-not-exist not found") || !strings.Contains(err.Error(), "etcd-server") {
		t.Fatalf("NewEtcd without the binary: %v", err)
	}
}

func TestStartEtcd(t *testing.T) {
	start := time.Now()
	e := StartEtcd(t)
	t.Logf("single etcd member ready in %v", time.Since(start))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := e.Status(ctx)
	if err != nil || s.MemberID == 0 || s.Leader != s.MemberID {
		t.Fatalf("status of a single member: %+v, %v", s, err)
	}
	if err := e.Restart(); err != nil {
		t.Fatalf("restart: %v", err)
	}
	e.Stop()
	if e.PID() != 0 {
		t.Fatal("PID after Stop")
	}
}

func TestEtcdClusterElectsNewLeader(t *testing.T) {
	start := time.Now()
	c := StartEtcdCluster(t, 3)
	t.Logf("3-member etcd cluster ready in %v", time.Since(start))
	if len(c.Endpoints()) != 3 {
		t.Fatalf("endpoints %v", c.Endpoints())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.Stop()
	start = time.Now()
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if leader == old {
		t.Fatal("stopped member still leads")
	}
	t.Logf("new leader %s %v after the old one was killed", leader.Name, time.Since(start))
	if err := old.Start(); err != nil {
		t.Fatalf("restart of the old leader: %v", err)
	}
}
