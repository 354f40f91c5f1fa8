package dlockk8s_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockk8s"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

var srv *testserver.Redis

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { srv = r }))
}

func newRDB(t *testing.T) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newLock(t *testing.T, rdb redis.UniversalClient, name, id string) *dlockk8s.Lock {
	t.Helper()
	o, err := redislock.NewOptimistic(rdb, 0)
	if err != nil {
		t.Fatal(err)
	}
	l, err := dlockk8s.New(o, name, resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func record(holder string) resourcelock.LeaderElectionRecord {
	now := metav1.NewTime(time.Now())
	return resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 2, AcquireTime: now, RenewTime: now}
}

// The operations as client-go uses them, with the API server's error kinds:
// not found, already exists, conflict on a stale version.
func TestRecordOperations(t *testing.T) {
	ctx := context.Background()
	name := t.Name()
	a, b := newLock(t, newRDB(t), name, "a"), newLock(t, newRDB(t), name, "b")

	if err := a.Update(ctx, record("a")); !errors.Is(err, dlockk8s.ErrNotInitialized) {
		t.Fatalf("Update before Get: %v", err)
	}
	if _, _, err := a.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of no record: %v, want NotFound", err)
	}
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, record("b")); !apierrors.IsAlreadyExists(err) || !errors.Is(err, redislock.ErrVersionConflict) {
		t.Fatalf("second Create: %v, want AlreadyExists", err)
	}
	rec, raw, err := b.Get(ctx)
	if err != nil || rec.HolderIdentity != "a" || len(raw) == 0 {
		t.Fatalf("Get: %+v %q %v", rec, raw, err)
	}
	if err := a.Update(ctx, record("a")); err != nil { // a renews
		t.Fatal(err)
	}
	if err := b.Update(ctx, record("b")); !apierrors.IsConflict(err) {
		t.Fatalf("Update on a stale version: %v, want Conflict", err)
	}
	rec, _, err = b.Get(ctx)
	if err != nil || rec.HolderIdentity != "a" {
		t.Fatalf("the conflicting Update wrote: %+v %v", rec, err)
	}
	if err := b.Update(ctx, record("b")); err != nil { // after a fresh read
		t.Fatal(err)
	}
	if err := a.Update(ctx, record("a")); !apierrors.IsConflict(err) {
		t.Fatalf("the deposed holder's Update: %v, want Conflict", err)
	}

	rdb := newRDB(t)
	if err := rdb.HSet(ctx, redislock.ValueKey("foreign"), "n", "1", "v", "not json").Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newLock(t, rdb, "foreign", "a").Get(ctx); !errors.Is(err, dlock.ErrConflict) {
		t.Fatalf("Get of a value that is not a record: %v, want ErrConflict", err)
	}
}

func TestNewInvalid(t *testing.T) {
	o, _ := redislock.NewOptimistic(newRDB(t), 0)
	for _, tc := range []struct {
		o        *redislock.Optimistic
		name, id string
	}{{nil, "n", "a"}, {o, "", "a"}, {o, "a{b}", "a"}, {o, "n", ""}} {
		if _, err := dlockk8s.New(tc.o, tc.name, resourcelock.ResourceLockConfig{Identity: tc.id}); !errors.Is(err, dlock.ErrInvalid) {
			t.Errorf("New(%v, %q, %q): %v, want ErrInvalid", tc.o != nil, tc.name, tc.id, err)
		}
	}
}

// leadLog records the candidates' leadership and fails the test if two lead
// at once (as their callbacks see it).
type leadLog struct {
	t       *testing.T
	mu      sync.Mutex
	leading map[int]bool
	started chan startEvent
	stopped chan int
}

type startEvent struct {
	id int
	at time.Time
}

func (g *leadLog) start(id int) {
	g.mu.Lock()
	for other, on := range g.leading {
		if on && other != id {
			g.t.Errorf("candidate %d started leading while %d leads", id, other)
		}
	}
	g.leading[id] = true
	g.mu.Unlock()
	g.started <- startEvent{id, time.Now()}
}

func (g *leadLog) stop(id int) {
	g.mu.Lock()
	was := g.leading[id]
	g.leading[id] = false
	g.mu.Unlock()
	if was {
		g.stopped <- id
	}
}

// Three candidates run client-go's LeaderElector over Locks on one
// redis-server (no API server): one leads at a time; a leader that steps down
// (ReleaseOnCancel) is replaced at the next retry; a leader cut off from Redis
// stops leading (RenewDeadline) before another takes over, which happens once
// the others have seen no renewal for LeaseDuration.
func TestLeaderElectorThreeCandidates(t *testing.T) {
	const (
		leaseDuration = 2 * time.Second
		renewDeadline = 1500 * time.Millisecond
		retryPeriod   = 250 * time.Millisecond
	)
	g := &leadLog{t: t, leading: map[int]bool{}, started: make(chan startEvent, 16), stopped: make(chan int, 16)}
	name := t.Name()
	var rdbs []*redis.Client
	var cancels []context.CancelFunc
	var wg sync.WaitGroup
	for i := range 3 {
		rdb := newRDB(t)
		rdbs = append(rdbs, rdb)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            newLock(t, rdb, name, fmt.Sprintf("candidate-%d", i)),
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			ReleaseOnCancel: true,
			Name:            name,
			Callbacks: leaderelection.LeaderCallbacks{
				// A leader's work runs until its context ends: that is when
				// it stops leading, as its work sees it.
				OnStartedLeading: func(ctx context.Context) { g.start(i); <-ctx.Done(); g.stop(i) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		wg.Add(1)
		go func() { defer wg.Done(); le.Run(ctx) }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	}()

	next := func(what string, within time.Duration) startEvent {
		t.Helper()
		select {
		case ev := <-g.started:
			return ev
		case <-time.After(within):
			t.Fatalf("no %s within %v", what, within)
			return startEvent{}
		}
	}
	first := next("first leader", 10*time.Second)

	// Step down: the record is released, another wins at its next retry.
	stepped := time.Now()
	cancels[first.id]()
	second := next("leader after the first stepped down", 10*time.Second)
	if second.id == first.id {
		t.Fatalf("candidate %d led again after stepping down", first.id)
	}
	t.Logf("stepped down: candidate %d leads %v later", second.id, second.at.Sub(stepped).Round(time.Millisecond))
	if d := second.at.Sub(stepped); d >= leaseDuration {
		t.Errorf("a released lease was taken after %v, not within LeaseDuration %v", d, leaseDuration)
	}

	// Cut off: the leader's Redis client closes, so its renewals fail.
	cut := time.Now()
	if err := rdbs[second.id].Close(); err != nil {
		t.Fatal(err)
	}
	third := next("leader after the second was cut off", 20*time.Second)
	took := third.at.Sub(cut)
	t.Logf("cut off: candidate %d leads %v later (LeaseDuration %v)", third.id, took.Round(time.Millisecond), leaseDuration)
	if third.id == second.id || third.id == first.id {
		t.Fatalf("candidate %d leads, want the third one", third.id)
	}
	select {
	case id := <-g.stopped: // the first's step-down
		if id != first.id {
			t.Fatalf("candidate %d stopped leading, want %d", id, first.id)
		}
	default:
		t.Fatal("the first leader's stop was not seen")
	}
	select {
	case id := <-g.stopped:
		if id != second.id {
			t.Fatalf("candidate %d stopped leading, want %d", id, second.id)
		}
	default:
		t.Fatal("the cut-off leader had not stopped leading when the next one started")
	}
	if took < leaseDuration-3*retryPeriod || took > leaseDuration+renewDeadline+2*time.Second {
		t.Errorf("take-over %v after the cut, want about LeaseDuration %v", took, leaseDuration)
	}
}
