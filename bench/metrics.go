package main

import (
	"context"
	"math"
	"net"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// workKey marks a context whose commands are the critical section's own work (the
// counter GET and SET), not lock traffic.
type workKey struct{}

func workContext(ctx context.Context) context.Context { return context.WithValue(ctx, workKey{}, true) }

// cmdCounter is a go-redis hook that counts the commands a client sends, split
// into lock traffic and critical-section work, and the connections it dials.
// Pub/sub connections do not pass through command hooks; the server-side counts
// see their commands.
type cmdCounter struct {
	lock, work, dials atomic.Int64
}

var _ redis.Hook = (*cmdCounter)(nil)

func (c *cmdCounter) add(ctx context.Context, n int64) {
	if ctx.Value(workKey{}) != nil {
		c.work.Add(n)
		return
	}
	c.lock.Add(n)
}

// DialHook implements redis.Hook.
func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.dials.Add(1)
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook.
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(ctx, 1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(ctx, int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// adminCommand reports whether a commandstats entry is the bench's own
// bookkeeping or connection set-up rather than lock or work traffic.
func adminCommand(name string) bool {
	switch name {
	case "info", "hello", "ping", "flushall", "flushdb", "dbsize", "select", "auth":
		return true
	}
	for _, p := range []string{"client|", "pubsub|", "config|", "memory|", "command|"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// serverCalls returns the number of non-administrative commands the server has
// executed, from INFO commandstats. Redis counts the commands a Lua script runs
// as well as the script call itself.
func serverCalls(ctx context.Context, admin *redis.Client) (int64, error) {
	s, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") || adminCommand(name) {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total, nil
}

// serverCPU returns the CPU time (user and system) the server has used, from
// INFO cpu.
func serverCPU(ctx context.Context, admin *redis.Client) (time.Duration, error) {
	secs, err := infoSum(ctx, admin, "cpu", "used_cpu_user", "used_cpu_sys")
	return time.Duration(secs * float64(time.Second)), err
}

// infoSum returns the sum of the named numeric fields of an INFO section.
func infoSum(ctx context.Context, admin *redis.Client, section string, names ...string) (float64, error) {
	s, err := admin.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(s, "\n") {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && slices.Contains(names, name) {
			x, _ := strconv.ParseFloat(v, 64)
			total += x
		}
	}
	return total, nil
}

// conns describes the connections of one client as the server sees them.
type conns struct {
	total int // every connection
	sub   int // connections in pub/sub mode (SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE)
}

// clientConns returns the connections named name (go-redis Options.ClientName).
func clientConns(ctx context.Context, admin *redis.Client, name string) (conns, error) {
	s, err := admin.ClientList(ctx).Result()
	if err != nil {
		return conns{}, err
	}
	var c conns
	for _, line := range strings.Split(s, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["name"] != name {
			continue
		}
		c.total++
		subs := 0
		for _, k := range []string{"sub", "psub", "ssub"} {
			n, _ := strconv.Atoi(fields[k])
			subs += n
		}
		if subs > 0 || strings.Contains(fields["flags"], "P") {
			c.sub++
		}
	}
	return c, nil
}

// channels returns the number of pub/sub channels, shard channels and patterns
// with at least one subscriber, from INFO stats.
func channels(ctx context.Context, admin *redis.Client) (int64, error) {
	n, err := infoSum(ctx, admin, "stats", "pubsub_channels", "pubsubshard_channels", "pubsub_patterns")
	return int64(n), err
}

// liveBytes returns the heap and stack memory in use after a garbage collection.
func liveBytes() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc + m.StackInuse)
}

// percentile returns the q-quantile (0..1) of sorted, by nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// jain returns Jain's fairness index of xs: 1 when all are equal, 1/n when one
// has everything.
func jain(xs []int64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += float64(x)
		sq += float64(x) * float64(x)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ratio returns a/b, or NaN when b is zero.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
