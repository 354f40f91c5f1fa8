package pglock

import (
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/driver"
)

// TestResultOutlivesItsHolding: dlock.Once's result, kept in the key's row,
// is written only by the key's holder, outlives the holding (a release, and a
// sweep of a row whose lock expired long ago), and is gone after its TTL.
func TestResultOutlivesItsHolding(t *testing.T) {
	d := newDriver(t)
	ctx := ctxT(t, 10*time.Second)
	key := dlocktest.Key(t)
	h := driver.Holding{Key: key, Owner: "computer", TTL: time.Minute}
	if err := d.PutResult(ctx, h, []byte("early"), time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("PutResult before the lock: %v, want ErrNotHeld", err)
	}
	if _, err := d.Acquire(ctx, driver.AcquireRequest{Key: key, Owner: h.Owner, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := d.PutResult(ctx, driver.Holding{Key: key, Owner: "other"}, []byte("x"), time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("PutResult by another owner: %v, want ErrNotHeld", err)
	}
	if err := d.PutResult(ctx, h, []byte("report"), time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, h); err != nil {
		t.Fatal(err)
	}
	admin(t, "UPDATE dlock_locks SET expires_at = now() - interval '2 hours' WHERE key = $1", key)
	if _, err := d.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := d.GetResult(ctx, key); err != nil || !ok || string(v) != "report" {
		t.Fatalf("GetResult after the release and a sweep: %q, %v, %v; want \"report\"", v, ok, err)
	}
	admin(t, "UPDATE dlock_locks SET result_until = now() - interval '1 second' WHERE key = $1", key)
	if v, ok, err := d.GetResult(ctx, key); err != nil || ok {
		t.Fatalf("GetResult after its TTL: %q, %v, %v; want none", v, ok, err)
	}
	if err := d.PutResult(ctx, h, make([]byte, maxResult+1), time.Minute); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("PutResult above the limit: %v, want ErrInvalid", err)
	}
}
