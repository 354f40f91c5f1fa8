// Command leader runs several instances of a service of which exactly one, the
// leader, pulls a feed, and shows another instance taking over within the
// leadership TTL when the leader dies:
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/leader
//
// The instances run in this one process, each with its own Redis connection,
// as they would in separate processes. The leader is killed by cutting its
// connection and stopping its work without resigning, as a crash would: its
// leadership stays in Redis until its TTL runs out, and a waiting instance
// wins then. Every pull is a write fenced by the token of the term that made
// it, so a stale leader could not write after its successor.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := config{Instances: 3, TTL: 2 * time.Second, Items: 10, PullEvery: 50 * time.Millisecond, Role: "feed-puller"}
	if _, err := run(ctx, addr, cfg, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// config sets the scenario.
type config struct {
	Instances int           // instances campaigning
	TTL       time.Duration // leadership TTL: a dead leader's role is free after it
	Items     int           // items each leader pulls before the next step
	PullEvery time.Duration // the feed's pace
	Role      string        // the role, also the prefix of the feed's keys
}

// report is what a run measured.
type report struct {
	First, Second string        // the instance leading before and after the kill
	Takeover      time.Duration // from the kill to the next leader's win
	Pulled        int64         // items pulled in all, as the feed counts them
}

// instance is one member of the service.
type instance struct {
	name   string
	rdb    *redis.Client
	locker *redislock.Client
	cancel context.CancelFunc
	done   chan struct{}
	killed atomic.Bool
}

// run plays the scenario: the instances campaign, the leader pulls cfg.Items
// items, it is killed, and a successor pulls cfg.Items more; then every
// instance stops, resigning if it leads.
func run(ctx context.Context, addr string, cfg config, out io.Writer) (report, error) {
	var rep report
	feed := cfg.Role + ":feed" // the number of items pulled so far
	var (
		mu      sync.Mutex
		leading = map[string]*dlock.Leadership{} // who leads, as the instances see it
		won     = make(chan string, cfg.Instances)
		pulled  atomic.Int64
		errs    = make(chan error, cfg.Instances)
	)
	var insts []*instance
	stop := func() {
		for _, in := range insts {
			in.cancel()
			<-in.done
			_ = in.rdb.Close()
		}
		insts = nil
	}
	defer stop()
	for i := 1; i <= cfg.Instances; i++ {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		locker, err := redislock.New(rdb, dlock.WithTTL(cfg.TTL), dlock.WithAutoRenew(true))
		if err != nil {
			return rep, err
		}
		fence, err := redislock.NewFence(rdb)
		if err != nil {
			return rep, err
		}
		ictx, cancel := context.WithCancel(ctx)
		in := &instance{name: "instance-" + strconv.Itoa(i), rdb: rdb, locker: locker, cancel: cancel, done: make(chan struct{})}
		insts = append(insts, in)
		go func() {
			defer close(in.done)
			for ictx.Err() == nil {
				lead, err := dlock.Campaign(ictx, locker, cfg.Role, dlock.WithMetadata(in.name))
				if err != nil {
					if ictx.Err() == nil {
						errs <- fmt.Errorf("%s: %w", in.name, err)
					}
					return
				}
				mu.Lock()
				for other := range leading {
					errs <- fmt.Errorf("%s won while %s leads", in.name, other)
				}
				leading[in.name] = lead
				mu.Unlock()
				won <- in.name
				err = pull(ictx, lead, fence, feed, cfg.PullEvery, &pulled)
				mu.Lock()
				delete(leading, in.name)
				mu.Unlock()
				if ictx.Err() != nil {
					if !in.killed.Load() {
						_ = lead.Resign(context.WithoutCancel(ctx)) // a clean shutdown
					}
					return
				}
				if err != nil && !errors.Is(err, dlock.ErrLockLost) && !errors.Is(err, dlock.ErrStaleToken) {
					errs <- fmt.Errorf("%s: %w", in.name, err)
					return
				}
				fmt.Fprintf(out, "%s lost the leadership: %v\n", in.name, context.Cause(lead.Context()))
			}
		}()
	}

	await := func(cond func() bool) error {
		for !cond() {
			select {
			case err := <-errs:
				return err
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(cfg.PullEvery):
			}
		}
		return nil
	}
	waitWin := func() (string, error) {
		select {
		case name := <-won:
			return name, nil
		case err := <-errs:
			return "", err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}

	var err error
	rep.First, err = waitWin()
	if err != nil {
		return rep, err
	}
	fmt.Fprintf(out, "%s leads and pulls the feed\n", rep.First)
	if err := await(func() bool { return pulled.Load() >= int64(cfg.Items) }); err != nil {
		return rep, err
	}

	// Kill the leader: its connection goes away and its work stops, with no
	// Resign. Redis keeps its leadership until the TTL runs out.
	var victim *instance
	for _, in := range insts {
		if in.name == rep.First {
			victim = in
		}
	}
	killed := time.Now()
	victim.killed.Store(true)
	// Its work stops first, so that nothing it does after its connection
	// went away is taken for a failure of the run.
	victim.cancel()
	_ = victim.rdb.Close()
	fmt.Fprintf(out, "%s killed after %d items\n", victim.name, pulled.Load())

	rep.Second, err = waitWin()
	if err != nil {
		return rep, err
	}
	rep.Takeover = time.Since(killed)
	fmt.Fprintf(out, "%s took over %v after the kill (leadership TTL %v)\n", rep.Second, rep.Takeover.Round(10*time.Millisecond), cfg.TTL)
	// Anyone alive can ask who leads.
	for _, in := range insts {
		if in != victim {
			info, err := dlock.CurrentLeader(ctx, in.locker, cfg.Role)
			if err != nil {
				return rep, err
			}
			fmt.Fprintf(out, "%s asks who leads: %s (token %d)\n", in.name, info.Metadata, info.Token)
			break
		}
	}
	from := pulled.Load()
	if err := await(func() bool { return pulled.Load() >= from+int64(cfg.Items) }); err != nil {
		return rep, err
	}
	stop()
	rep.Pulled = pulled.Load()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	n, err := rdb.Get(ctx, feed).Int64()
	if err != nil {
		return rep, err
	}
	// A pull whose reply the killed leader never saw may have landed.
	if n < rep.Pulled || n > rep.Pulled+1 {
		return rep, fmt.Errorf("the feed counts %d items, the leaders saw %d pulls", n, rep.Pulled)
	}
	fmt.Fprintf(out, "%d items pulled in all (%d lost with the killed leader's last reply)\n", n, n-rep.Pulled)
	rep.Pulled = n
	return rep, nil
}

// pull is the leader's work: while it leads, it takes the next item of the feed
// every interval, with a write fenced by its term's token (a deposed leader's
// write is refused with dlock.ErrStaleToken).
func pull(ctx context.Context, lead *dlock.Leadership, fence *redislock.Fence, feed string, every time.Duration, pulled *atomic.Int64) error {
	lctx := lead.Context()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-lctx.Done():
			return context.Cause(lctx)
		case <-t.C:
		}
		if _, err := fence.IncrBy(lctx, lead.Lease(), feed, 1); err != nil {
			if lctx.Err() != nil {
				return context.Cause(lctx)
			}
			return err
		}
		pulled.Add(1)
	}
}
