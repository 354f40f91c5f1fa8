package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// A lock taken by one process (an API handler) and released by another (the
// worker that finishes the job): the first detaches its lease and passes the
// reference on, the second resumes it, works under it and unlocks.
func ExampleLease_Detach() {
	ctx := context.Background()
	store := memlock.NewStore() // each process has its own Client of one store
	api, _ := memlock.New(store)
	worker, _ := memlock.New(store)

	lease, err := api.TryLock(ctx, "jobs:42")
	if err != nil {
		panic(err)
	}
	ref, err := lease.Detach() // the renewal stops here; the lock stays held
	if err != nil {
		panic(err)
	}
	// ... ref travels with the job (a queue message, a CI variable) ...

	held, err := worker.Resume(ctx, ref)
	if err != nil {
		panic(err) // ErrNotHeld: the holding expired or was taken meanwhile
	}
	fmt.Println(held.Key(), held.Token() == lease.Token())
	if err := held.Unlock(ctx); err != nil {
		panic(err)
	}
	_, err = worker.Resume(ctx, ref)
	fmt.Println(errors.Is(err, dlock.ErrNotHeld))
	// Output:
	// jobs:42 true
	// true
}

// FuzzResume: whatever string is given as a reference, Resume returns an
// error matching ErrInvalid or ErrNotHeld, or a lease of the one holding
// there is, and never panics.
func FuzzResume(f *testing.F) {
	store := memlock.NewStore()
	c, err := memlock.New(store)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryLock(ctx, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	ref, err := l.Detach()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ref)
	f.Add(ref[:len(ref)/2])
	f.Add("dlock1.")
	f.Add("dlock1.e30")
	f.Add(strings.Replace(ref, "dlock1.", "dlock2.", 1))
	f.Fuzz(func(t *testing.T, s string) {
		got, err := c.Resume(ctx, s)
		switch {
		case err == nil:
			if got.Key() != "fuzz" || got.Token() != l.Token() {
				t.Fatalf("Resume(%q) gave a lease of %q token %d", s, got.Key(), got.Token())
			}
			ref, err := got.Detach()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Resume(ctx, ref); err != nil {
				t.Fatalf("Resume of the reference Detach gave again: %v", err)
			}
		case errors.Is(err, dlock.ErrInvalid), errors.Is(err, dlock.ErrNotHeld):
		default:
			t.Fatalf("Resume(%q): %v, want ErrInvalid or ErrNotHeld", s, err)
		}
	})
}
