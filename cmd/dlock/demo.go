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
	fs := newFlagSet("demo")
	fs.StringVar(&o.url, "redis", "", "Redis `URL` (redis://host:port/db); default: an embedded in-process Redis")
	fs.IntVar(&o.workers, "workers", 8, "concurrent workers, each with its own connection (1..256)")
	fs.IntVar(&o.rounds, "rounds", 100, "increments per worker (1..100000)")
	fs.IntVar(&o.stock, "stock", 50, "items in the flash sale (1..1000000)")
	return fs
}

func demoCommand() command {
	return command{
		name: "demo", summary: "show lost updates without a lock and none with dlock (embedded Redis unless --redis)",
		synopsis: "dlock demo [--redis URL] [--workers N] [--rounds N] [--stock N]",
		help: `Replays the read-check-write race of a shared Redis counter and a flash sale,
first without a lock, then under dlock (and the sale a third time with
optimistic versioning, no lock), and prints what each lost and how long it
took. Without --redis it runs on an embedded in-process Redis; on a real
server its keys (under dlock-demo:) expire within a minute and are deleted
when it ends.

examples:
  dlock demo
  dlock demo --redis redis://127.0.0.1:6379/0 --workers 16`,
		flags: func() *flag.FlagSet { return new(demoFlags).define() },
		run:   runDemo,
	}
}

func runDemo(ctx context.Context, e *env, args []string) int {
	c := demoCommand()
	o := new(demoFlags)
	fs := o.define()
	a, code, ok := parseFlags(e, c, fs, args)
	if !ok {
		return code
	}
	if len(a.before)+len(a.after) > 0 || o.workers < 1 || o.workers > 256 || o.rounds < 1 || o.rounds > 100000 || o.stock < 1 || o.stock > 1000000 {
		return fail(e, c.name, usageErrorf("--workers must be 1..256, --rounds 1..100000, --stock 1..1000000, no arguments"))
	}
	addr, where, cleanup, err := demoServer(o.url)
	if err != nil {
		return fail(e, c.name, err)
	}
	defer cleanup()
	fmt.Fprintf(e.stdout, "dlock demo on %s: %d workers, each with its own connection\n\n", where, o.workers)

	d := &demo{opts: addr, workers: o.workers, ns: fmt.Sprintf("dlock-demo:%x", rand.Uint64())}
	if err := d.ping(ctx); err != nil {
		return fail(e, c.name, err)
	}
	defer d.deleteKeys(ctx)

	fmt.Fprintf(e.stdout, "1. Shared counter (read-modify-write): each worker does GET, works ~1ms, then SET n+1, %d times.\n", o.rounds)
	fmt.Fprintf(e.stdout, "   %-12s %10s %10s %12s %10s\n", "", "increments", "final", "lost updates", "time")
	for _, locked := range []bool{false, true} {
		r, err := d.counter(ctx, locked, o.rounds)
		if err != nil {
			return fail(e, c.name, err)
		}
		fmt.Fprintf(e.stdout, "   %-12s %10d %10d %12d %10v\n", label(locked), r.done, r.final, r.done-r.final, r.duration.Round(time.Millisecond))
	}

	fmt.Fprintf(e.stdout, "\n2. Flash sale: %d items; each buyer does GET stock, checks it is above 0, works ~1ms, then SET stock-1.\n", o.stock)
	fmt.Fprintf(e.stdout, "   %-12s %10s %10s %12s %10s\n", "", "sold", "stock left", "oversold", "time")
	for _, locked := range []bool{false, true} {
		r, err := d.sale(ctx, locked, o.stock)
		if err != nil {
			return fail(e, c.name, err)
		}
		fmt.Fprintf(e.stdout, "   %-12s %10d %10d %12d %10v\n", label(locked), r.done, r.final, max(0, r.done-int64(o.stock)), r.duration.Round(time.Millisecond))
	}
	r, err := d.optimisticSale(ctx, o.stock)
	if err != nil {
		return fail(e, c.name, err)
	}
	fmt.Fprintf(e.stdout, "   %-12s %10d %10d %12d %10v\n", "optimistic", r.done, r.final, max(0, r.done-int64(o.stock)), r.duration.Round(time.Millisecond))
	fmt.Fprintln(e.stdout, "\nWithout a lock, concurrent read-check-write loses updates and sells what is not there.")
	fmt.Fprintln(e.stdout, "Under dlock every update lands and nothing is oversold.")
	fmt.Fprintln(e.stdout, "Optimistic: no lock; each sale writes only if the stock's version is unchanged, and retries otherwise.")
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
			return nil, "", nil, usageErrorf("bad --redis URL %s: %s", maskURL(url), urlProblem(err, url))
		}
		return opt, "Redis at " + opt.Addr, func() {}, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, "", nil, unavailableErrorf("embedded Redis: %v", err)
	}
	return &redis.Options{Addr: m.Addr()}, "an embedded in-process Redis (" + m.Addr() + ")", m.Close, nil
}

type demo struct {
	opts    *redis.Options
	workers int
	ns      string   // the prefix of every key the demo writes
	keys    []string // the resources written, for deleteKeys
}

// demoKeyTTL bounds how long a key of the demo outlives an interrupted run.
const demoKeyTTL = time.Minute

// resource returns the key of one scenario and remembers it for deleteKeys.
func (d *demo) resource(name string) string {
	key := d.ns + ":" + name
	d.keys = append(d.keys, key)
	return key
}

// deleteKeys deletes what the demo wrote: its counters, and the lock and fence
// keys of their locks (a fence counter would otherwise stay for
// redislock.FenceRetention).
func (d *demo) deleteKeys(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	c := d.client()
	defer c.Close()
	for _, key := range d.keys {
		c.Del(ctx, key, redislock.LockKey(key), redislock.FenceKey(key), redislock.ValueKey(key))
	}
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
		return unavailableErrorf("cannot reach Redis at %s: %v", d.opts.Addr, err)
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
	return time.Since(start), firstError(errs)
}

// firstError returns the first of the workers' errors, saying how many more
// workers failed.
func firstError(errs []error) error {
	var first error
	more := 0
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			more++
		}
	}
	if more > 0 {
		return fmt.Errorf("%w (and %d more workers failed)", first, more)
	}
	return first
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
	key := d.resource("counter:" + label(locked))
	var acked atomic.Int64
	el, err := d.each(ctx, func(rdb *redis.Client, locker *redislock.Client) error {
		for i := 0; i < rounds; i++ {
			err := critical(ctx, locked, locker, key, func(ctx context.Context) error {
				n, err := rdb.Get(ctx, key).Int64()
				if err != nil && !errors.Is(err, redis.Nil) {
					return err
				}
				work()
				return rdb.Set(ctx, key, n+1, demoKeyTTL).Err()
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
	key := d.resource("stock:" + label(locked))
	setup := d.client()
	defer setup.Close()
	if err := setup.Set(ctx, key, stock, demoKeyTTL).Err(); err != nil {
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
				if err := rdb.Set(ctx, key, n-1, demoKeyTTL).Err(); err != nil {
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

// optimisticSale is the flash sale without a lock: each buyer reads the stock
// and its version, works, and writes stock-1 only if the version is unchanged
// (redislock.Optimistic), starting again from the fresh stock otherwise.
func (d *demo) optimisticSale(ctx context.Context, stock int) (demoResult, error) {
	key := d.resource("stock:optimistic")
	setup := d.client()
	defer setup.Close()
	store, err := redislock.NewOptimistic(setup, demoKeyTTL)
	if err != nil {
		return demoResult{}, err
	}
	if _, err := store.CompareAndSet(ctx, key, 0, strconv.Itoa(stock)); err != nil {
		return demoResult{}, err
	}
	errSoldOut := errors.New("sold out")
	retry := dlock.ExponentialBackoff(time.Millisecond, 16*time.Millisecond) // until the stock is gone
	var sold atomic.Int64
	el, err := d.each(ctx, func(rdb *redis.Client, _ *redislock.Client) error {
		buyer, err := redislock.NewOptimistic(rdb, demoKeyTTL)
		if err != nil {
			return err
		}
		for {
			_, err := buyer.Update(ctx, key, func(cur redislock.Versioned) (string, error) {
				n, err := strconv.Atoi(cur.Value)
				if err != nil {
					return "", err
				}
				if n <= 0 {
					return "", errSoldOut
				}
				work()
				return strconv.Itoa(n - 1), nil
			}, retry)
			if errors.Is(err, errSoldOut) {
				return nil
			}
			if err != nil {
				return err
			}
			sold.Add(1)
		}
	})
	if err != nil {
		return demoResult{}, err
	}
	v, err := store.Get(ctx, key)
	if err != nil {
		return demoResult{}, err
	}
	setup.Del(ctx, redislock.ValueKey(key))
	left, err := strconv.ParseInt(v.Value, 10, 64)
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
