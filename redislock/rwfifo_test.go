package redislock_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// answered is a go-redis hook that signals every script reply its client gets.
type answered struct{ replies chan struct{} }

func (a *answered) DialHook(next redis.DialHook) redis.DialHook { return next }

func (a *answered) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			select {
			case a.replies <- struct{}{}:
			default:
			}
		}
		return err
	}
}

func (a *answered) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// rwWriter is a writer with a Client and a connection pool of its own, as a
// separate process would have, and a signal for each reply of its client.
type rwWriter struct {
	m   *redislock.RWMutex
	ans *answered
}

func newRWWriter(t *testing.T) rwWriter {
	rdb := newRDB(t, srv.Addr)
	ans := &answered{replies: make(chan struct{}, 1)}
	rdb.AddHook(ans)
	return rwWriter{m: newRWMutex(t, rdb), ans: ans}
}

// TestRWMutexWritersFIFO: writers of a read-write lock, each a Client of its
// own, get the lock in the order in which they came to wait, also a writer
// that comes while an earlier one holds the lock: it goes after those that
// were already waiting.
func TestRWMutexWritersFIFO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := dlocktest.Key(t)
	const n = 6
	ws := make([]rwWriter, n+1)
	for i := range ws {
		ws[i] = newRWWriter(t)
	}
	first, err := ws[0].m.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		order   = make(chan int, n)
		holding = make(chan int, n) // who holds now, until it is told to go
		release = make([]chan struct{}, n+1)
		failed  = make(chan error, n) // a Lock that failed
		errs    = make(chan error, n) // the Unlocks
		got     atomic.Int32
	)
	start := func(i int) {
		release[i] = make(chan struct{})
		// Drain a reply signal left from earlier calls of this client.
		select {
		case <-ws[i].ans.replies:
		default:
		}
		go func() {
			l, err := ws[i].m.Lock(ctx, key, dlock.WithWait(20*time.Second))
			if err != nil {
				failed <- err
				return
			}
			got.Add(1)
			order <- i
			holding <- i
			<-release[i]
			errs <- l.Unlock(ctx)
		}()
		// Its first attempt has been answered: it waits, behind the others.
		select {
		case <-ws[i].ans.replies:
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	for i := 1; i < n; i++ {
		start(i)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The first waiter gets the lock; a writer that comes now queues behind
	// the others that wait.
	if h := <-holding; h != 1 {
		t.Fatalf("writer %d got the lock first, want 1", h)
	}
	start(n)
	close(release[1])
	for range n - 1 {
		select {
		case h := <-holding:
			close(release[h])
		case err := <-failed:
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("%d of %d writers got the lock: %v", got.Load(), n, ctx.Err())
		}
	}
	var seen []int
	for range n {
		seen = append(seen, <-order)
	}
	want := []int{1, 2, 3, 4, 5, 6}
	if !slices.Equal(seen, want) {
		t.Errorf("writers got the lock in the order %v, want %v", seen, want)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
