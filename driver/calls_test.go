package driver_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dlock-go/dlock/driver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGoRunsEveryCall runs calls from several goroutines at once, some while
// others block, and checks that each ran once; the workers end when idle (the
// leak check at the end).
func TestGoRunsEveryCall(t *testing.T) {
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	ran := map[int]int{}
	release := make(chan struct{})
	for i := range n {
		wg.Add(1)
		driver.Go(func() {
			defer wg.Done()
			if i%10 == 0 {
				<-release // a blocked call does not hold up the others
			}
			mu.Lock()
			ran[i]++
			mu.Unlock()
		})
	}
	close(release)
	wg.Wait()
	for i := range n {
		if ran[i] != 1 {
			t.Fatalf("call %d ran %d times", i, ran[i])
		}
	}
}

// TestBoundCallNamesTheStore checks that a call its bound cut short fails
// with ErrUnavailable naming the store, and that one the caller's context
// ended, or that failed on its own, keeps its error.
func TestBoundCallNamesTheStore(t *testing.T) {
	ctx, done := driver.BoundCall(context.Background(), time.Millisecond, "the store")
	<-ctx.Done()
	err := done(ctx.Err())
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("a call cut short by its bound: %v, want ErrUnavailable", err)
	}
	if want := "the store did not answer within 1ms"; !strings.Contains(err.Error(), want) {
		t.Fatalf("a call cut short by its bound: %q, want it to say %q", err, want)
	}

	parent, cancel := context.WithCancel(context.Background())
	ctx, done = driver.BoundCall(parent, time.Hour, "the store")
	cancel()
	<-ctx.Done()
	if err := done(ctx.Err()); err != context.Canceled {
		t.Fatalf("a call the caller cancelled: %v, want context.Canceled as it is", err)
	}

	own := errors.New("no such key")
	_, done = driver.BoundCall(context.Background(), time.Hour, "the store")
	if err := done(own); err != own {
		t.Fatalf("a call that failed on its own: %v, want its error as it is", err)
	}
}

// TestHeardSince checks that Heard reports a message heard at or after the
// time asked about, and no other.
func TestHeardSince(t *testing.T) {
	var h driver.Heard
	before := time.Now()
	if h.Since("k", before) {
		t.Fatal("the zero Heard heard of k")
	}
	h.Add("k")
	if !h.Since("k", before) {
		t.Fatal("a message heard after the time asked about is not reported")
	}
	if h.Since("k", time.Now().Add(time.Second)) {
		t.Fatal("a message heard before the time asked about is reported")
	}
	if h.Since("other", before) {
		t.Fatal("a key no message named is reported")
	}
}
