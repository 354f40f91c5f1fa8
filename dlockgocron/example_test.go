package dlockgocron_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
	"github.com/dlock-go/dlock/memlock"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

// Two instances of a service schedule the same job; the one that takes the
// job's lock runs it, the other skips the run. The in-memory store stands in
// for Redis here: in production each instance has its own redislock.Client.
func Example() {
	store := memlock.NewStore()
	var runs atomic.Int32
	attempts := make(chan struct{}, 2) // one per instance: ran, or skipped
	for range 2 {
		client, _ := memlock.New(store)
		locker, _ := dlockgocron.NewLocker(client,
			dlockgocron.WithMinHold(time.Second), // clocks of the instances differ by less
			dlockgocron.WithKeyPrefix("jobs:"))
		s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		_, _ = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
			gocron.NewTask(func() { runs.Add(1); attempts <- struct{}{} }),
			gocron.WithName("nightly-report"),
			gocron.WithEventListeners(gocron.AfterLockError(func(uuid.UUID, string, error) { attempts <- struct{}{} })))
		s.Start()
		defer func() {
			_ = s.Shutdown()
			ctx, cancel := context.WithCancel(context.Background())
			cancel()              // do not wait out the min-hold:
			_ = locker.Close(ctx) // release at once
		}()
	}
	<-attempts
	<-attempts
	fmt.Println("runs:", runs.Load())
	// Output: runs: 1
}

// Instances campaign for one role in the background; the leader's scheduler
// runs the jobs and the others skip them. A leader that dies is replaced once
// its TTL has passed.
func ExampleNewElector() {
	store := memlock.NewStore()
	var electors []*dlockgocron.Elector
	for range 3 {
		client, _ := memlock.New(store)
		e, _ := dlockgocron.NewElector(client, "scheduler-leader",
			dlock.WithTTL(10*time.Second), dlock.WithAutoRenew(true))
		defer func() { _ = e.Close(context.Background()) }()
		electors = append(electors, e)
		// s, _ := gocron.NewScheduler(gocron.WithDistributedElector(e))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	won := make(chan *dlock.Leadership, len(electors))
	for _, e := range electors {
		go func() {
			if ld, err := e.Wait(ctx); err == nil {
				won <- ld
			}
		}()
	}
	ld := <-won
	leaders := 0
	for _, e := range electors {
		if e.IsLeader(ctx) == nil {
			leaders++
		}
	}
	fmt.Println("leaders:", leaders, "role:", ld.Role())
	// Output: leaders: 1 role: scheduler-leader
}

// Guard runs a job under a context that ends when the job's lease is lost, so
// that a job whose lock was taken over stops instead of running on twice.
func ExampleLocker_Guard() {
	client, _ := memlock.New(memlock.NewStore())
	locker, _ := dlockgocron.NewLocker(client)
	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	defer func() { _ = s.Shutdown() }()
	done := make(chan string, 1)
	_, _ = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(locker.Guard("sync-accounts", func(ctx context.Context) error {
			// Pass the lease's token to the store written (fencing), and stop
			// when ctx ends.
			token := locker.Lease("sync-accounts").Token()
			done <- fmt.Sprintf("fenced with a token: %v, context ended: %v", token > 0, ctx.Err() != nil)
			return nil
		})),
		gocron.WithName("sync-accounts"))
	s.Start()
	fmt.Println(<-done)
	// Output: fenced with a token: true, context ended: false
}
