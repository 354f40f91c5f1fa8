package dlockcron_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockcron"
	"github.com/dlock-go/dlock/memlock"
	"github.com/robfig/cron/v3"
)

// Two instances wrap the same job with SkipIfLocked: while one runs it, the
// other's run is skipped. The in-memory store stands in for Redis here; in
// production each instance has its own redislock.Client, and adds the wrapped
// job to its cron:
//
//	c := cron.New()
//	c.AddJob("@hourly", cron.NewChain(cron.Recover(logger), skip).Then(job))
func Example() {
	store := memlock.NewStore()
	var skip [2]cron.JobWrapper
	for i := range skip {
		client, _ := memlock.New(store)
		locker, _ := dlockcron.New(client, dlockcron.WithMinHold(time.Second))
		defer func() {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()              // do not wait out the min-hold:
			_ = locker.Close(ctx) // release at once
		}()
		skip[i], _ = locker.SkipIfLocked("hourly-report")
	}
	second := cron.NewChain(skip[1]).Then(cron.FuncJob(func() { fmt.Println("second instance ran") }))
	first := cron.NewChain(skip[0]).Then(cron.FuncJob(func() {
		second.Run() // the second instance's tick comes while the first runs
		fmt.Println("first instance ran")
	}))
	first.Run()
	second.Run() // within the first's min-hold: skipped too
	// Output: first instance ran
}

// A ContextFunc runs under its lease's context: it ends when the lease is
// lost, so the job stops instead of going on without its lock.
func ExampleContextFunc() {
	client, _ := memlock.New(memlock.NewStore())
	locker, _ := dlockcron.New(client, dlockcron.WithLockOptions(dlock.WithTTL(time.Minute), dlock.WithAutoRenew(true)))
	skip, _ := locker.SkipIfLocked("sync-accounts")
	job := cron.NewChain(skip).Then(dlockcron.ContextFunc(func(ctx context.Context) {
		// Pass the token to the store written (fencing); stop when ctx ends.
		token := locker.Lease("sync-accounts").Token()
		fmt.Println("fenced with a token:", token > 0, "context ended:", ctx.Err() != nil)
	}))
	job.Run()
	// Output: fenced with a token: true context ended: false
}
