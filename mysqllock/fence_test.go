package mysqllock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
)

// fenceTable makes a table of writes for a test.
func fenceTable(t testing.TB) string {
	t.Helper()
	admin(t, "DROP TABLE IF EXISTS fenced_writes")
	admin(t, "CREATE TABLE fenced_writes (id INT PRIMARY KEY, token BIGINT) ENGINE=InnoDB")
	return "fenced_writes"
}

func TestFenceCommitsWhileHeldAndRefusesALostLease(t *testing.T) {
	table := fenceTable(t)
	ctx := ctxT(t, 30*time.Second)
	db := newDB(t)
	d, _ := NewDriver(db)
	c := clientOf(t, d)
	key := dlocktest.Key(t)
	lease, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Fence(ctx, tx, lease); err != nil {
		t.Fatalf("Fence of a held lease: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1, ?)", lease.Token()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// Released: refused.
	tx, _ = db.BeginTx(ctx, nil)
	if err := d.Fence(ctx, tx, lease); !errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("Fence of a released lease: %v, want ErrNotHeld", err)
	}
	_ = tx.Rollback()
	// Taken over since: stale.
	next, err := newClient(t).TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = next.Unlock(ctx) }()
	tx, _ = db.BeginTx(ctx, nil)
	defer func() { _ = tx.Rollback() }()
	if err := d.Fence(ctx, tx, lease); !errors.Is(err, dlock.ErrStaleToken) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Fence of a lease taken over: %v, want ErrStaleToken", err)
	}
	if err := d.Fence(ctx, nil, lease); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Fence without a transaction: %v", err)
	}
	if err := d.Fence(ctx, tx, nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("Fence without a lease: %v", err)
	}
}

// TestFenceHoldsOffTheNextHolderUntilCommit: a lease that expires while its
// fenced transaction is open does not let the next holder in before the
// transaction commits.
func TestFenceHoldsOffTheNextHolderUntilCommit(t *testing.T) {
	table := fenceTable(t)
	ctx := ctxT(t, 30*time.Second)
	db := newDB(t)
	d, _ := NewDriver(db)
	c := clientOf(t, d)
	key := dlocktest.Key(t)
	const ttl = 300 * time.Millisecond
	lease, err := c.TryLock(ctx, key, dlock.WithTTL(ttl), dlock.WithAutoRenew(false))
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.Fence(ctx, tx, lease); err != nil {
		t.Fatal(err)
	}
	got := make(chan *dlock.Lease, 1)
	go func() {
		l, err := newClient(t).Lock(context.Background(), key, dlock.WithWait(20*time.Second))
		if err != nil {
			t.Errorf("the next holder: %v", err)
		}
		got <- l
	}()
	<-lease.Done()
	time.Sleep(ttl)
	select {
	case <-got:
		t.Fatal("the next holder got the key while a fenced transaction was open")
	default:
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES (1, ?)", lease.Token()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit of the fenced transaction: %v", err)
	}
	select {
	case next := <-got:
		if next == nil || next.Token() <= lease.Token() {
			t.Fatalf("next holder %v", next)
		}
		_ = next.Unlock(ctx)
	case <-time.After(15 * time.Second):
		t.Fatal("the next holder never got the key after the commit")
	}
}
