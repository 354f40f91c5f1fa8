package dlocktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
)

// testOnce: dlock.Once computes a key's value once for callers on several
// Clients, hands the stored result to every one, computes again when the
// computer failed (unless errors are shared) or lost its lock, and refuses a
// result above its size limit.
func testOnce(t *testing.T, b Backend) {
	clients := make([]*dlock.Client, 4)
	for i := range clients {
		clients[i] = client(t, b.New(t))
	}
	if _, ok := clients[0].Driver().(driver.ResultKeeper); !ok {
		_, err := dlock.Once{Client: clients[0]}.Do(ctxT(t, 5*time.Second), Key(t), func(context.Context) ([]byte, error) {
			t.Fatal("computed on a backend that keeps no results")
			return nil, nil
		})
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("Once on a backend without driver.ResultKeeper: %v, want errors.ErrUnsupported", err)
		}
		return
	}
	ctx := ctxT(t, 60*time.Second)

	// callers runs n callers of key, spread over the Clients, each with fn,
	// and returns their results and errors.
	callers := func(n int, key string, o dlock.Once, fn func(ctx context.Context) ([]byte, error)) ([][]byte, []error) {
		vals, errs := make([][]byte, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				oc := o
				oc.Client = clients[i%len(clients)]
				vals[i], errs[i] = oc.Do(ctx, key, fn)
			}()
		}
		wg.Wait()
		return vals, errs
	}

	t.Run("one computation for every caller", func(t *testing.T) {
		var runs atomic.Int32
		key := Key(t)
		vals, errs := callers(16, key, dlock.Once{}, func(ctx context.Context) ([]byte, error) {
			n := runs.Add(1)
			time.Sleep(100 * time.Millisecond) // the computation: long enough that the others wait for it
			return fmt.Appendf(nil, "value %d", n), nil
		})
		if got := runs.Load(); got != 1 {
			t.Fatalf("%d computations for 16 callers, want 1", got)
		}
		for i := range vals {
			if errs[i] != nil || string(vals[i]) != "value 1" {
				t.Fatalf("caller %d got %q, %v; want the one value", i, vals[i], errs[i])
			}
		}
		// A later caller within the result window gets it without computing.
		v, err := dlock.Once{Client: clients[1]}.Do(ctx, key, func(context.Context) ([]byte, error) {
			return nil, errors.New("computed again within the result window")
		})
		if err != nil || string(v) != "value 1" {
			t.Fatalf("a later caller got %q, %v", v, err)
		}
	})

	t.Run("a failed computation is done again", func(t *testing.T) {
		var runs atomic.Int32
		boom := errors.New("boom")
		_, errs := callers(8, Key(t), dlock.Once{}, func(ctx context.Context) ([]byte, error) {
			if runs.Add(1) == 1 {
				time.Sleep(50 * time.Millisecond)
				return nil, boom
			}
			return []byte("ok"), nil
		})
		failed := 0
		for _, err := range errs {
			switch {
			case errors.Is(err, boom):
				failed++
			case err != nil:
				t.Fatalf("caller: %v", err)
			}
		}
		if failed != 1 || runs.Load() != 2 {
			t.Fatalf("%d callers saw the error of the first computation, %d computations; want 1 and 2", failed, runs.Load())
		}
	})

	t.Run("a shared error is every caller's", func(t *testing.T) {
		var runs atomic.Int32
		_, errs := callers(8, Key(t), dlock.Once{ShareErrors: true}, func(ctx context.Context) ([]byte, error) {
			runs.Add(1)
			time.Sleep(50 * time.Millisecond)
			return nil, errors.New("upstream down")
		})
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "upstream down") {
				t.Fatalf("caller %d: %v, want the shared error", i, err)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("%d computations with ShareErrors, want 1", runs.Load())
		}
	})

	t.Run("a computer that loses its lock is replaced", func(t *testing.T) {
		key := Key(t)
		if _, ok := clients[0].Driver().(driver.Inspector); !ok {
			t.Skip("the backend cannot force-unlock")
		}
		started := make(chan struct{})
		forced := make(chan error, 1)
		go func() {
			select {
			case <-started:
				_, err := clients[1].ForceUnlock(ctx, key)
				forced <- err
			case <-ctx.Done():
				forced <- ctx.Err()
			}
		}()
		var runs atomic.Int32
		vals, errs := callers(4, key, dlock.Once{}, func(ctx context.Context) ([]byte, error) {
			if runs.Add(1) == 1 {
				close(started)
				<-ctx.Done() // lost: the force below ends the lease
				return []byte("late"), nil
			}
			return []byte("second"), nil
		})
		if err := <-forced; err != nil {
			t.Fatalf("ForceUnlock: %v", err)
		}
		lost := 0
		for i := range vals {
			switch {
			case errors.Is(errs[i], dlock.ErrLockLost):
				lost++
			case errs[i] != nil || string(vals[i]) != "second":
				t.Fatalf("caller %d got %q, %v; want the second computation's value", i, vals[i], errs[i])
			}
		}
		if lost != 1 || runs.Load() != 2 {
			t.Fatalf("%d computers lost their lock, %d computations; want 1 and 2", lost, runs.Load())
		}
	})

	t.Run("a result above the size limit is not kept", func(t *testing.T) {
		key := Key(t)
		o := dlock.Once{Client: clients[0], MaxSize: 8}
		if _, err := o.Do(ctx, key, func(context.Context) ([]byte, error) { return bytes.Repeat([]byte("x"), 9), nil }); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("a 9-byte result with MaxSize 8: %v, want ErrInvalid", err)
		}
		v, err := o.Do(ctx, key, func(context.Context) ([]byte, error) { return []byte("small"), nil })
		if err != nil || string(v) != "small" {
			t.Fatalf("after a refused result: %q, %v; want a new computation", v, err)
		}
		for _, bad := range []dlock.Once{{Client: clients[0], ResultTTL: time.Microsecond}, {Client: clients[0], ResultTTL: -time.Second}, {Client: clients[0], MaxSize: -1}, {}} {
			if _, err := bad.Do(ctx, Key(t), func(context.Context) ([]byte, error) { return nil, nil }); !errors.Is(err, dlock.ErrInvalid) {
				t.Fatalf("Once %+v: %v, want ErrInvalid", bad, err)
			}
		}
		rk := clients[0].Driver().(driver.ResultKeeper)
		called := false
		_, err = dlock.Once{Client: clients[0], MaxSize: rk.MaxResult()}.Do(ctx, Key(t), func(context.Context) ([]byte, error) {
			called = true
			return nil, nil
		})
		if !errors.Is(err, dlock.ErrInvalid) || called {
			t.Fatalf("MaxSize above the backend's: %v (computed: %v), want ErrInvalid before computing", err, called)
		}
	})

	t.Run("the result lives its TTL", func(t *testing.T) {
		if why, ok := b.Skip["Once/the result lives its TTL"]; ok {
			t.Skip(why)
		}
		key := Key(t)
		o := dlock.Once{Client: clients[0], ResultTTL: 300 * time.Millisecond}
		var runs atomic.Int32
		fn := func(context.Context) ([]byte, error) { return fmt.Appendf(nil, "%d", runs.Add(1)), nil }
		first, err := o.Do(ctx, key, fn)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(600 * time.Millisecond) // past the result's TTL
		again, err := o.Do(ctx, key, fn)
		if err != nil || string(first) != "1" || string(again) != "2" {
			t.Fatalf("results %q then %q (%v), want 1 then 2 after the result's TTL", first, again, err)
		}
	})
}
