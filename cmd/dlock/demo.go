package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// demoResult is what one run of a demo scenario counted.
type demoResult struct {
	done     int64 // increments acknowledged, or items sold
	final    int64 // the counter's final value, or the stock left
	duration time.Duration
}

// demoFlags are the flags of dlock demo.
type demoFlags struct {
	url                    string
	workers, rounds, stock int
}

func (o *demoFlags) define() *flag.FlagSet {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.StringVar(&o.url, "redis", "", "Redis URL (redis://host:port/db); default: an embedded in-process Redis")
	fs.IntVar(&o.workers, "workers", 8, "concurrent workers, each with its own connection")
	fs.IntVar(&o.rounds, "rounds", 100, "increments per worker")
	fs.IntVar(&o.stock, "stock", 50, "items in the flash sale")
	return fs
}

func runDemo(ctx context.Context, e *env, args []string) int {
	o := new(demoFlags)
	fs := o.define()
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: dlock demo [--redis URL] [--workers N] [--rounds N] [--stock N]")
		fmt.Fprintln(e.stderr, "\nReplays the read-check-write race of a shared Redis counter and a flash sale,")
		fmt.Fprintln(e.stderr, "first without a lock, then under dlock, and prints what each lost.")
		fmt.Fprintln(e.stderr, "\nexamples:\n  dlock demo\n  dlock demo --redis redis://127.0.0.1:6379/0 --workers 16")
		fmt.Fprintln(e.stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || o.workers < 1 || o.workers > 256 || o.rounds < 1 || o.rounds > 100000 || o.stock < 1 || o.stock > 1000000 {
		fmt.Fprintln(e.stderr, "dlock demo: --workers must be 1..256, --rounds 1..100000, --stock 1..1000000, no arguments")
		return exitUsage
	}
	addr, where, cleanup, err := demoServer(o.url)
	if err != nil {
		fmt.Fprintf(e.stderr, "dlock demo: %v\n", err)
		return exitUsage
	}
	defer cleanup()
	fmt.Fprintf(e.stdout, "dlock demo on %s: %d workers, each with its own connection\n\n", where, o.workers)

	d := &demo{opts: addr, workers: o.workers, ns: fmt.Sprintf("dlock-demo:%x", rand.Uint64())}
	if err := d.ping(ctx); err != nil {
		fmt.Fprintf(e.stderr, "dlock demo: %v\n", err)
		return exitUnavailable
	}

	fmt.Fprintf(e.stdout, "1. Shared counter: each worker does GET, works ~1ms, then SET n+1, %d times (seed 002's read-modify-write).\n", o.rounds)
	fmt.Fprintf(e.stdout, "   %-12s %10s %10s %12s %10s\n", "", "increments", "final", "lost updates", "time")
	for _, locked := range []bool{false, true} {
		r, err := d.counter(ctx, locked, o.rounds)
		if err != nil {
			fmt.Fprintf(e.stderr, "dlock demo: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(e.stdout, "   %-12s %10d %10d %12d %10v\n", label(locked), r.done, r.final, r.done-r.final, r.duration.Round(time.Millisecond))
	}

	fmt.Fprintf(e.stdout, "\n2. Flash sale: %d items; each buyer does GET stock, checks it is above 0, works ~1ms, then SET stock-1.\n", o.stock)
	fmt.Fprintf(e.stdout, "   %-12s %10s %10s %12s %10s\n", "", "sold", "stock left", "oversold", "time")
	for _, locked := range []bool{false, true} {
		r, err := d.sale(ctx, locked, o.stock)
		if err != nil {
			fmt.Fprintf(e.stderr, "dlock demo: %v\n", err)
			return exitFailure
		}
		fmt.Fprintf(e.stdout, "   %-12s %10d %10d %12d %10v\n", label(locked), r.done, r.final, max(0, r.done-int64(o.stock)), r.duration.Round(time.Millisecond))
	}
	fmt.Fprintln(e.stdout, "\nWithout a lock, concurrent read-check-write loses updates and sells what is not there.")
	fmt.Fprintln(e.stdout, "Under dlock every update lands and nothing is oversold.")
	return exitOK
}

func label(locked bool) string {
	if locked {
		return "with dlock"
	}
	return "no lock"
}

// demoServer returns the client options for --redis, or starts an embedded Redis.
func demoServer(url string) (*redis.Options, string, func(), error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("bad --redis URL: %v", redactURLError(err, url))
		}
		return opt, "Redis at " + opt.Addr, func() {}, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, fmt.Errorf("embedded Redis: %w", err)
	}
	return &redis.Options{Addr: m.Addr()}, "an embedded in-process Redis (" + m.Addr() + ")", m.Close, nil
}

type demo struct {
	opts    *redis.Options
	workers int
	ns      string
}

func (d *demo) client() *redis.Client {
	o := *d.opts
	o.PoolSize = 2
	o.ContextTimeoutEnabled = true
	return redis.NewClient(&o)
}

func (d *demo) ping(ctx context.Context) error {
	c := d.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("cannot reach Redis at %s: %w", d.opts.Addr, err)
	}
	return nil
}

// each runs fn in every worker with its own Redis connection and dlock client.
func (d *demo) each(ctx context.Context, fn func(rdb *redis.Client, locker *redislock.Client) error) (time.Duration, error) {
	var wg sync.WaitGroup
	errs := make([]error, d.workers)
	start := time.Now()
	for i := 0; i < d.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := d.client()
			defer rdb.Close()
			locker, err := redislock.New(rdb, dlock.WithTTL(5*time.Second),
				dlock.WithRetry(dlock.ExponentialBackoff(time.Millisecond, 16*time.Millisecond)))
			if err == nil {
				err = fn(rdb, locker)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return time.Since(start), errors.Join(errs...)
}

// critical runs fn under the lock on key when locked, and bare otherwise.
func critical(ctx context.Context, locked bool, locker *redislock.Client, key string, fn func(context.Context) error) error {
	if !locked {
		return fn(ctx)
	}
	return dlock.Do(ctx, locker, key, fn)
}

func work() { time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Microsecond) }

func (d *demo) counter(ctx context.Context, locked bool, rounds int) (demoResult, error) {
	key := d.ns + ":counter:" + label(locked)
	var acked atomic.Int64
	el, err := d.each(ctx, func(rdb *redis.Client, locker *redislock.Client) error {
		for i := 0; i < rounds; i++ {
			err := critical(ctx, locked, locker, key, func(ctx context.Context) error {
				n, err := rdb.Get(ctx, key).Int64()
				if err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
				work()
				return rdb.Set(ctx, key, n+1, time.Hour).Err()
			})
			if err != nil {
				return err
			}
			acked.Add(1)
		}
		return nil
	})
	if err != nil {
		return demoResult{}, err
	}
	final, err := d.readAndDelete(ctx, key)
	return demoResult{done: acked.Load(), final: final, duration: el}, err
}

func (d *demo) sale(ctx context.Context, locked bool, stock int) (demoResult, error) {
	key := d.ns + ":stock:" + label(locked)
	setup := d.client()
	defer setup.Close()
	if err := setup.Set(ctx, key, stock, time.Hour).Err(); err != nil {
		return demoResult{}, err
	}
	var sold atomic.Int64
	el, err := d.each(ctx, func(rdb *redis.Client, locker *redislock.Client) error {
		for {
			var soldOut bool
			err := critical(ctx, locked, locker, key, func(ctx context.Context) error {
				n, err := rdb.Get(ctx, key).Int64()
				if err != nil {
					return err
				}
				if n <= 0 {
					soldOut = true
					return nil
				}
				work()
				if err := rdb.Set(ctx, key, n-1, time.Hour).Err(); err != nil {
					return err
				}
				sold.Add(1)
				return nil
			})
			if err != nil || soldOut {
				return err
			}
		}
	})
	if err != nil {
		return demoResult{}, err
	}
	left, err := d.readAndDelete(ctx, key)
	return demoResult{done: sold.Load(), final: left, duration: el}, err
}

func (d *demo) readAndDelete(ctx context.Context, key string) (int64, error) {
	c := d.client()
	defer c.Close()
	v, err := c.Get(ctx, key).Result()
	if err != nil {
		return 0, err
	}
	c.Del(ctx, key)
	return strconv.ParseInt(v, 10, 64)
}
