// Package dlockk8s runs client-go's leader election (k8s.io/client-go/tools/leaderelection)
// on Redis instead of a Kubernetes API server: Lock implements
// resourcelock.Interface, storing the LeaderElectionRecord as a versioned value
// written with redislock's optimistic compare-and-set. Controllers and
// controller-runtime managers (its LeaderElectionResourceLockInterface option)
// can then elect a leader among candidates that share a Redis server rather
// than a cluster: across clusters, or outside Kubernetes.
//
//	store, _ := redislock.NewOptimistic(rdb, 0)
//	lock, _ := dlockk8s.New(store, "my-controller", resourcelock.ResourceLockConfig{Identity: podName})
//	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{Lock: lock, LeaseDuration: 15 * time.Second,
//		RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, Callbacks: callbacks})
//
// What it promises: the same as client-go's leader election over a Lease
// object, with Redis in the API server's place. Every write of the record is
// conditional on the version read (as an update of a Lease is on its
// resourceVersion), so among candidates that race for an expired or released
// record exactly one wins, and a leader renews only the record it wrote.
//
// What it does not promise, and what client-go does not either: the election
// is judged by each candidate's local clock (a candidate takes over when it has
// seen no change of the record for LeaseDuration), so a leader paused past
// RenewDeadline, or clocks that run at different rates, can make two
// candidates act as leader for a while; client-go offers no fencing token, so
// the work of a deposed leader is not refused by the resources it writes (use a
// dlock lease's token for that). Beyond client-go: the record is only as
// durable as the Redis server that holds it: a Sentinel or Cluster failover
// that loses the latest writes of the record (replication is asynchronous)
// rolls it back to an older version, which an API server never does, and the
// candidates then judge the election from a stale record until the leader's
// next renewal settles it. No Lease object exists in
// any cluster, so kubectl and Kubernetes RBAC do not see or guard this
// election.
package dlockk8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leases is the resource the errors name, so that client-go's
// apierrors.IsNotFound and IsConflict checks read them as for a Lease.
var leases = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}

// ErrNotInitialized is returned by Update before the record was read by Get or
// written by Create (client-go calls Get or Create first).
var ErrNotInitialized = errors.New("dlockk8s: record not read yet: call Get or Create first")

// Lock is a resourcelock.Interface over one versioned value in Redis, named by
// the election's name (the key redislock.ValueKey(name)). Give every candidate
// its own Lock with its own Identity. It is safe for concurrent use.
type Lock struct {
	o    *redislock.Optimistic
	name string
	cfg  resourcelock.ResourceLockConfig

	mu      sync.Mutex
	version uint64 // the version of the record last read or written
	known   bool
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns a Lock for the election name, stored through o (see
// redislock.NewOptimistic: its TTL, when not 0, makes an abandoned election's
// record expire, and must then be well above the LeaseDuration). cfg gives the
// candidate's Identity (required, unique among the candidates) and an optional
// EventRecorder. It returns an error matching dlock.ErrInvalid for a nil o, a
// name that driver.ValidateKey refuses, or an empty identity; it does no I/O.
func New(o *redislock.Optimistic, name string, cfg resourcelock.ResourceLockConfig) (*Lock, error) {
	if o == nil {
		return nil, fmt.Errorf("%w: nil Optimistic", dlock.ErrInvalid)
	}
	if err := driver.ValidateKey(name); err != nil {
		return nil, err
	}
	if cfg.Identity == "" {
		return nil, fmt.Errorf("%w: empty identity", dlock.ErrInvalid)
	}
	return &Lock{o: o, name: name, cfg: cfg}, nil
}

// Get reads the record. A record that does not exist is an error for which
// apierrors.IsNotFound is true (client-go then calls Create). The raw bytes
// are the record as stored (JSON), which client-go compares to notice
// changes. Redis errors match dlock.ErrUnavailable, and a value that is not a
// record dlock.ErrConflict.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	v, err := l.o.Get(ctx, l.name)
	if err != nil {
		return nil, nil, err
	}
	if v.Version == 0 {
		return nil, nil, apierrors.NewNotFound(leases, l.name)
	}
	var rec resourcelock.LeaderElectionRecord
	if err := json.Unmarshal([]byte(v.Value), &rec); err != nil {
		return nil, nil, fmt.Errorf("%w: dlockk8s: %q does not hold a leader election record: %v", dlock.ErrConflict, l.name, err)
	}
	l.remember(v.Version)
	return &rec, []byte(v.Value), nil
}

func (l *Lock) remember(version uint64) {
	l.mu.Lock()
	l.version, l.known = version, true
	l.mu.Unlock()
}

// Create writes the record if there is none. When another candidate created it
// first, the error satisfies apierrors.IsAlreadyExists (and matches
// redislock.ErrVersionConflict).
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	return l.write(ctx, 0, ler, func(err error) error {
		return fmt.Errorf("%w (%w)", apierrors.NewAlreadyExists(leases, l.name), err)
	})
}

// Update writes the record if it is still at the version this Lock last read
// or wrote. When another candidate wrote in between, nothing is written and the
// error satisfies apierrors.IsConflict (and matches
// redislock.ErrVersionConflict); before any Get or Create it is
// ErrNotInitialized.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	version, known := l.version, l.known
	l.mu.Unlock()
	if !known {
		return ErrNotInitialized
	}
	return l.write(ctx, version, ler, func(err error) error {
		return fmt.Errorf("%w (%w)", apierrors.NewConflict(leases, l.name, err), err)
	})
}

func (l *Lock) write(ctx context.Context, version uint64, ler resourcelock.LeaderElectionRecord, conflict func(error) error) error {
	b, err := json.Marshal(ler)
	if err != nil {
		return fmt.Errorf("%w: dlockk8s: %v", dlock.ErrInvalid, err)
	}
	n, err := l.o.CompareAndSet(ctx, l.name, version, string(b))
	if errors.Is(err, redislock.ErrVersionConflict) {
		return conflict(err)
	}
	if err != nil {
		return err
	}
	l.remember(n)
	return nil
}

// RecordEvent passes s to the EventRecorder, if one was given, as an event
// about a Lease named after the election.
func (l *Lock) RecordEvent(s string) {
	if l.cfg.EventRecorder == nil {
		return
	}
	subject := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: l.name}}
	l.cfg.EventRecorder.Eventf(subject, "Normal", "LeaderElection", "%v %v", l.cfg.Identity, s)
}

// Identity returns the candidate's identity.
func (l *Lock) Identity() string { return l.cfg.Identity }

// Describe names the election for client-go's logs: "redis/" and its name.
func (l *Lock) Describe() string { return "redis/" + l.name }
