package natslock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// newSemaphore returns a Client of semaphores of n permits over a
// connection of its own to the single server, its bucket migrated.
func newSemaphore(t testing.TB, n int, opts ...dlock.Option) (*Client, *SemaphoreDriver) {
	t.Helper()
	s, err := NewSemaphoreDriver(connect(t, srv.URL), n)
	return clientOver(t, s, err, opts...), s
}

// TestSemaphoreConformance runs the suite on a semaphore of one permit, which
// is an exclusive lock.
func TestSemaphoreConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Backend{
		Info: driver.DriverInfo{Backend: "natslock", Kind: driver.KindSemaphore},
		New: func(t testing.TB, opts ...dlock.Option) dlock.Locker {
			s, err := NewSemaphoreDriver(connect(t, srv.URL), 1)
			return clientOver(t, s, err, opts...)
		},
	})
}

// Three permits: three holders of separate processes at once with
// increasing tokens, a fourth refused and then, waiting, granted the permit
// a release frees; the queue shows the holders and the waiter; a Client
// made with another number of permits is refused while the key is in use.
func TestSemaphorePermits(t *testing.T) {
	key := dlocktest.Key(t)
	ctx := ctxT(t, 60*time.Second)
	var leases []*dlock.Lease
	var s *SemaphoreDriver
	for i := range 3 {
		c, d := newSemaphore(t, 3, dlock.WithTTL(20*time.Second))
		s = d
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("permit %d: %v", i, err)
		}
		if i > 0 && l.Token() <= leases[i-1].Token() {
			t.Errorf("permit %d: token %d not above %d", i, l.Token(), leases[i-1].Token())
		}
		leases = append(leases, l)
	}
	fourth, _ := newSemaphore(t, 3, dlock.WithTTL(20*time.Second))
	if _, err := fourth.TryLock(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("a fourth permit: %v, want ErrNotObtained", err)
	}
	other, _ := newSemaphore(t, 2)
	if _, err := other.TryLock(ctx, key); !errors.Is(err, dlock.ErrConflict) {
		t.Errorf("a Client of 2 permits on a key of 3: %v, want ErrConflict", err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := fourth.Lock(ctx, key)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	for range 500 {
		info, err := s.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Waiters == 1 {
			if info.Kind != driver.KindSemaphore || info.Holders != 3 || info.Limit != 3 || info.Token != leases[0].Token() {
				t.Errorf("inspection: %+v", info)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := leases[1].Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= leases[2].Token() {
		t.Errorf("the fourth permit's token %d not above %d", l.Token(), leases[2].Token())
	}
	for _, l := range []*dlock.Lease{leases[0], leases[2], l} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewSemaphoreDriver(connect(t, srv.URL), 0); !errors.Is(err, dlock.ErrInvalid) {
		t.Errorf("0 permits: %v, want ErrInvalid", err)
	}
}
