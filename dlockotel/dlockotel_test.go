package dlockotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/testproxy"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
)

var redisAddr string

func TestMain(m *testing.M) {
	code := testserver.Main(m, func(r *testserver.Redis) { redisAddr = r.Addr })
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is an Observer recording into the SDK's in-memory reader and recorder.
type env struct {
	obs    *dlockotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newEnv(t *testing.T, opts ...dlockotel.Option) *env {
	t.Helper()
	e := &env{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := dlockotel.New(append([]dlockotel.Option{dlockotel.WithMeterProvider(mp), dlockotel.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.obs = obs
	return e
}

// point is one data point of a metric: its attributes and its value (the sum,
// or the count of a histogram).
type point struct {
	attrs attribute.Set
	value float64
}

func (e *env) points(t *testing.T, name string) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []point
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName || sm.Scope.Version != dlockotel.Version {
			t.Fatalf("scope %+v", sm.Scope)
		}
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				out = appendCounts(out, d)
			case metricdata.Histogram[int64]:
				out = appendCounts(out, d)
			case metricdata.Sum[int64]:
				out = appendValues(out, d.DataPoints)
			case metricdata.Gauge[int64]:
				out = appendValues(out, d.DataPoints)
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

func appendCounts[N int64 | float64](out []point, h metricdata.Histogram[N]) []point {
	for _, p := range h.DataPoints {
		out = append(out, point{p.Attributes, float64(p.Count)})
	}
	return out
}

func appendValues(out []point, dps []metricdata.DataPoint[int64]) []point {
	for _, p := range dps {
		out = append(out, point{p.Attributes, float64(p.Value)})
	}
	return out
}

// value sums the points of name whose attributes include want.
func (e *env) value(t *testing.T, name string, want ...attribute.KeyValue) float64 {
	t.Helper()
	sum := 0.0
	for _, p := range e.points(t, name) {
		ok := true
		for _, kv := range want {
			if v, has := p.attrs.Value(kv.Key); !has || v != kv.Value {
				ok = false
			}
		}
		if ok {
			sum += p.value
		}
	}
	return sum
}

func newRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func newClient(t *testing.T, addr string, opts ...dlock.Option) *redislock.Client {
	t.Helper()
	c, err := redislock.New(newRedis(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openLossWatch has c take and release a lock of its own, and waits until
// its loss subscription (which lingers) is open, so that it is not the one
// that finds a loss a test leaves to a renewal: a Client checks its holdings
// once when it subscribes.
func openLossWatch(t *testing.T, c *redislock.Client) {
	t.Helper()
	testserver.OpenLossWatch(t, redisAddr, func(ctx context.Context) error {
		l, err := c.TryLock(ctx, "warm:"+t.Name())
		if err != nil {
			return err
		}
		return l.Unlock(ctx)
	})
}

func outcome(o string) attribute.KeyValue {
	return dlockotel.AttrOutcome.String(o)
}

func TestEveryAcquireOutcome(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs))
	other := newClient(t, redisAddr) // another process's contender

	l, err := c.TryLock(ctx, "orders:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.value(t, "dlock.leases.held"); got != 1 {
		t.Fatalf("leases held %v, want 1", got)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	held, err := other.TryLock(ctx, "orders:1")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Unlock(ctx)

	if _, err := c.TryLock(ctx, "orders:1"); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, "orders:1", dlock.WithWait(100*time.Millisecond)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	stop := time.AfterFunc(100*time.Millisecond, cancel)
	defer stop.Stop()
	if _, err := c.Lock(cctx, "orders:1"); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// A server that is gone.
	dead := testserver.StartRedis(t)
	dead.Stop()
	gone := newClient(t, dead.Addr, dlock.WithObserver(e.obs))
	if _, err := gone.TryLock(ctx, "orders:1"); !errors.Is(err, dlock.ErrUnavailable) {
		t.Fatal(err)
	}

	base := []attribute.KeyValue{dlockotel.AttrBackend.String("redislock"), dlockotel.AttrPrimitive.String(driver.KindMutex), dlockotel.AttrKeyGroup.String("orders")}
	for _, tc := range []struct {
		o    string
		mode string
	}{
		{dlockotel.OutcomeAcquired, "try"},
		{dlockotel.OutcomeBusy, "try"},
		{dlockotel.OutcomeTimeout, "wait"},
		{dlockotel.OutcomeCanceled, "wait"},
		{dlockotel.OutcomeUnavailable, "try"},
	} {
		want := append([]attribute.KeyValue{outcome(tc.o), dlockotel.AttrMode.String(tc.mode)}, base...)
		if got := e.value(t, "dlock.acquire.duration", want...); got != 1 {
			t.Errorf("acquire.duration{%s,%s}: %v acquisitions, want 1", tc.o, tc.mode, got)
		}
		if got := e.value(t, "dlock.acquire.attempts", want...); got != 1 {
			t.Errorf("acquire.attempts{%s,%s}: %v records, want 1", tc.o, tc.mode, got)
		}
	}
	if got := e.value(t, "dlock.waiters"); got != 0 {
		t.Errorf("waiters %v after every wait ended", got)
	}
	if got := e.value(t, "dlock.leases.held"); got != 0 {
		t.Errorf("leases held %v after Unlock", got)
	}
	if got := e.value(t, "dlock.hold.duration", dlockotel.AttrEnd.String("released")); got != 1 {
		t.Errorf("hold.duration{released}: %v", got)
	}

	spans := map[string]int{}
	errs := 0
	for _, s := range e.spans.Ended() {
		spans[s.Name()]++
		if s.Name() == "dlock.acquire" && s.Status().Code == codes.Error {
			errs++
		}
		if s.InstrumentationScope().Name != dlockotel.ScopeName {
			t.Errorf("span scope %+v", s.InstrumentationScope())
		}
	}
	if spans["dlock.acquire"] != 5 || spans["dlock.hold"] != 1 || errs != 4 {
		t.Errorf("spans %v, %d failed acquisitions; want 5 acquisitions (4 failed) and 1 hold", spans, errs)
	}
}

func TestRenewalFailureAndLoss(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	p := testproxy.Start(t, redisAddr)
	c := newClient(t, p.Addr, dlock.WithObserver(e.obs))
	l, err := c.TryLock(ctx, "reports:daily", dlock.WithTTL(900*time.Millisecond), dlock.WithAutoRenew(true), dlock.WithRenewEvery(150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	p.SetDown(true) // the holder is cut off from the server
	<-l.Done()
	if err := l.Err(); !errors.Is(err, dlock.ErrLockLost) {
		t.Fatal(err)
	}
	_ = l.Unlock(ctx)
	p.SetDown(false)

	if got := e.value(t, "dlock.renewals", dlockotel.AttrRenewalOutcome.String("transient")); got < 1 {
		t.Errorf("no failed renewal counted")
	}
	if got := e.value(t, "dlock.leases.lost", dlockotel.AttrLossCause.String(string(dlock.LossLocalDeadline))); got != 1 {
		t.Errorf("leases.lost{local_deadline} = %v, want 1", got)
	}
	if got := e.value(t, "dlock.hold.duration", dlockotel.AttrEnd.String("lost")); got != 1 {
		t.Errorf("hold.duration{lost} = %v, want 1", got)
	}
	if got := e.value(t, "dlock.leases.held"); got != 0 {
		t.Errorf("leases held %v after the loss", got)
	}
	var hold sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == "dlock.hold" {
			hold = s
		}
	}
	if hold == nil {
		t.Fatal("no dlock.hold span")
	}
	events := map[string]int{}
	for _, ev := range hold.Events() {
		events[ev.Name]++
	}
	if events["dlock.renewal.failed"] < 1 || events["dlock.lost"] != 1 || hold.Status().Code != codes.Error {
		t.Errorf("hold span events %v, status %v", events, hold.Status())
	}
}

func TestRefusedRenewalIsALoss(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs))
	openLossWatch(t, c)
	l, err := c.TryLock(ctx, "sync:1", dlock.WithTTL(time.Second), dlock.WithAutoRenew(true), dlock.WithRenewEvery(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Deleted by hand, which nobody is told of: the next renewal finds it.
	if err := newRedis(t, redisAddr).Del(ctx, redislock.LockKey("sync:1")).Err(); err != nil {
		t.Fatal(err)
	}
	<-l.Done()
	_ = l.Unlock(ctx)
	if got := e.value(t, "dlock.leases.lost", dlockotel.AttrLossCause.String(string(dlock.LossNotHeld))); got != 1 {
		t.Errorf("leases.lost{not_held} = %v, want 1", got)
	}
}

func TestKeyCardinality(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs))
	for i := range 1000 {
		l, err := c.TryLock(ctx, fmt.Sprintf("tenant:%d", i), dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	pts := e.points(t, "dlock.acquire.duration")
	if len(pts) != 1 || pts[0].value != 1000 {
		t.Fatalf("1000 keys gave %d attribute sets: %v", len(pts), pts)
	}
	if v, _ := pts[0].attrs.Value(dlockotel.AttrKeyGroup); v.AsString() != "tenant" {
		t.Fatalf("key group %v", v)
	}
	if len(e.points(t, "dlock.hold.duration")) != 1 {
		t.Fatal("hold.duration has more than one attribute set")
	}

	// The raw key only when asked.
	raw := newEnv(t, dlockotel.WithRawKey(true), dlockotel.WithKeyGroup(func(string) string { return "all" }))
	rc := newClient(t, redisAddr, dlock.WithObserver(raw.obs))
	for i := range 3 {
		l, err := rc.TryLock(ctx, fmt.Sprintf("tenant:%d", i))
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(ctx)
	}
	if got := len(raw.points(t, "dlock.acquire.duration")); got != 3 {
		t.Fatalf("raw keys gave %d sets, want 3", got)
	}
	if got := raw.value(t, "dlock.acquire.duration", dlockotel.AttrKeyGroup.String("all")); got != 3 {
		t.Fatalf("custom key group: %v", got)
	}
}

// TestKeyWithoutSeparatorIsBounded: keys with no ':' (invoice-1, invoice-2,
// ...) all fall in one group by default, not one group per key.
func TestKeyWithoutSeparatorIsBounded(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs))
	const keys = 500
	for i := range keys {
		l, err := c.TryLock(ctx, fmt.Sprintf("invoice-%d", i), dlock.WithTTL(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	groups := map[string]bool{}
	for _, name := range []string{"dlock.acquire.duration", "dlock.hold.duration", "dlock.leases.held"} {
		for _, p := range e.points(t, name) {
			v, _ := p.attrs.Value(dlockotel.AttrKeyGroup)
			groups[v.AsString()] = true
		}
	}
	if len(groups) != 1 || !groups[dlockotel.NoGroup] {
		t.Fatalf("%d keys without ':' gave %d key groups, want only %q", keys, len(groups), dlockotel.NoGroup)
	}
	if got := e.value(t, "dlock.acquire.duration", dlockotel.AttrKeyGroup.String(dlockotel.NoGroup)); got != keys {
		t.Fatalf("acquisitions in group %q: %v, want %d", dlockotel.NoGroup, got, keys)
	}
}

func TestLeader(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs))
	ld, err := dlock.Campaign(ctx, c, "scheduler")
	if err != nil {
		t.Fatal(err)
	}
	role := dlockotel.AttrRole.String("scheduler")
	if got := e.value(t, "dlock.leader", role); got != 1 {
		t.Fatalf("leader %v while leading", got)
	}
	if err := ld.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.value(t, "dlock.leader", role); got != 0 {
		t.Fatalf("leader %v after resigning", got)
	}
}

func TestKeyGroup(t *testing.T) {
	for in, want := range map[string]string{"orders:42": "orders", "a:b:c": "a", "plain": dlockotel.NoGroup, "invoice-7": dlockotel.NoGroup, "": dlockotel.NoGroup, ":x": ""} {
		if got := dlockotel.KeyGroup(in); got != want {
			t.Errorf("KeyGroup(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestStaleTokens: a fenced write refused as stale counts in
// dlock.fence.stale_tokens and is an event of the superseded lease's hold
// span, while that lease does not know it was superseded (its lock deleted by
// hand, which nobody is told of; a force-unlock would end it, and its span,
// at once).
func TestStaleTokens(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	rdb := newRedis(t, redisAddr)
	c := newClient(t, redisAddr, dlock.WithObserver(e.obs), dlock.WithTTL(10*time.Second))
	openLossWatch(t, c)
	f, err := redislock.NewFence(rdb)
	if err != nil {
		t.Fatal(err)
	}
	key := "billing:stale"
	t.Cleanup(func() { rdb.Del(ctx, "fenced:"+key) })
	old, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Del(ctx, redislock.LockKey(key)).Err(); err != nil {
		t.Fatal(err)
	}
	cur, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, cur, "fenced:"+key, "new", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, old, "fenced:"+key, "old", 0); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("stale write: %v", err)
	}
	if got := e.value(t, "dlock.fence.stale_tokens", dlockotel.AttrKeyGroup.String("billing")); got != 1 {
		t.Errorf("dlock.fence.stale_tokens = %v, want 1", got)
	}
	_ = old.Unlock(ctx)
	if err := cur.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	events := 0
	for _, s := range e.spans.Ended() {
		for _, ev := range s.Events() {
			if ev.Name == "dlock.fence.stale_token" {
				events++
			}
		}
	}
	if events != 1 {
		t.Errorf("%d dlock.fence.stale_token span events, want 1", events)
	}
}

// TestPrimitiveOfEveryRedisKind: every kind of Redis lock reaches the metrics
// with its own dlock.primitive, and dlock.backend is the driver's name.
func TestPrimitiveOfEveryRedisKind(t *testing.T) {
	ctx := context.Background()
	rdb := newRedis(t, redisAddr)
	e := newEnv(t)
	opts := []dlock.Option{dlock.WithObserver(e.obs)}
	fair, err := redislock.NewFair(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	reentrant, err := redislock.NewReentrant(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := redislock.NewRWMutex(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := redislock.NewSemaphore(rdb, 2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lockers := map[string]dlock.Locker{
		driver.KindMutex:     newClient(t, redisAddr, opts...),
		driver.KindFair:      fair,
		driver.KindReentrant: reentrant,
		driver.KindWrite:     rw,
		driver.KindRead:      rw.RLocker(),
		driver.KindSemaphore: sem,
	}
	for kind, l := range lockers {
		lease, err := l.TryLock(ctx, "kinds:"+kind)
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
	}
	for kind := range lockers {
		if n := e.value(t, "dlock.acquire.duration", dlockotel.AttrBackend.String("redislock"), dlockotel.AttrPrimitive.String(kind)); n != 1 {
			t.Errorf("%v acquisitions of a %s lock recorded with dlock.primitive=%s, want 1", n, kind, kind)
		}
	}
}
