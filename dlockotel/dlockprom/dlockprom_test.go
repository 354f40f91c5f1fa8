package dlockprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel/dlockprom"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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

func TestNilRegisterer(t *testing.T) {
	if _, _, err := dlockprom.New(nil); !errors.Is(err, dlock.ErrInvalid) {
		t.Fatalf("New(nil): %v, want an error matching dlock.ErrInvalid", err)
	}
}

// TestSecondNewOnOneRegistry: a second New on a registry that already has
// dlock's metrics is refused, and the registry keeps serving the first
// Observer's metrics.
func TestSecondNewOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, mp, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	obs2, mp2, err := dlockprom.New(reg)
	if err == nil {
		defer mp2.Shutdown(context.Background())
	}
	if !errors.Is(err, dlock.ErrInvalid) || obs2 != nil || mp2 != nil {
		t.Fatalf("second New on one registry: %v, %v, %v; want an error matching dlock.ErrInvalid", obs2, mp2, err)
	}
	t.Log(err)

	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	c, err := redislock.New(rdb, dlock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := c.TryLock(ctx, "billing:second")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := testutil.GatherAndCount(reg, "dlock_acquire_duration_seconds")
	if err != nil {
		t.Fatalf("Gather after the refused New: %v", err)
	}
	if n != 1 {
		t.Fatalf("dlock_acquire_duration_seconds: %d series, want 1", n)
	}

	// Registries of their own, or one registry under distinct prefixes, each
	// take an Observer.
	for _, r := range []prometheus.Registerer{prometheus.NewRegistry(), prometheus.WrapRegistererWithPrefix("a_", reg)} {
		_, mp, err := dlockprom.New(r)
		if err != nil {
			t.Fatal(err)
		}
		defer mp.Shutdown(context.Background())
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

// TestNextToTheProgramsOwnExporter: a registry that already collects the
// program's own OpenTelemetry metrics takes dlock's as well, and its scrapes
// keep working.
func TestNextToTheProgramsOwnExporter(t *testing.T) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	own := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	defer own.Shutdown(context.Background())
	_, mp, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		if mf.GetName() == "target_info" {
			n = len(mf.GetMetric())
		}
	}
	if n != 1 {
		t.Fatalf("target_info: %d series, want the program's own", n)
	}
}

// Contenders in separate Clients (each its own connections, as separate
// processes would have) take one key in turn; the registry the test passes
// shows what they did.
func TestContendedMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	obs, mp, err := dlockprom.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	const contenders, rounds = 4, 5
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, contenders*rounds)
	for range contenders {
		rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		c, err := redislock.New(rdb, dlock.WithObserver(obs))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				l, err := c.Lock(ctx, "billing:run", dlock.WithWait(30*time.Second))
				if err != nil {
					errs <- err
					return
				}
				// Hold it across a few round trips to the server.
				for range 3 {
					if _, err := l.TTL(ctx); err != nil {
						errs <- err
					}
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	for name, want := range map[string]int{
		"dlock_acquire_duration_seconds": 1, // one series: acquired, wait, billing, redislock, mutex
		"dlock_hold_duration_seconds":    1,
		"dlock_waiters":                  1,
		"dlock_leases_held":              1,
	} {
		n, err := testutil.GatherAndCount(reg, name)
		if err != nil {
			t.Fatal(err)
		}
		if n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
	expected := `
# HELP dlock_leases_held Leases held now.
# TYPE dlock_leases_held gauge
dlock_leases_held{dlock_backend="redislock",dlock_key_group="billing",dlock_primitive="mutex",otel_scope_name="github.com/dlock-go/dlock/dlockotel",otel_scope_schema_url="",otel_scope_version="0.1.0"} 0
# HELP dlock_waiters Lock calls waiting now.
# TYPE dlock_waiters gauge
dlock_waiters{dlock_backend="redislock",dlock_key_group="billing",dlock_primitive="mutex",otel_scope_name="github.com/dlock-go/dlock/dlockotel",otel_scope_schema_url="",otel_scope_version="0.1.0"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "dlock_leases_held", "dlock_waiters"); err != nil {
		t.Error(err)
	}

	// What a Prometheus server scraping /metrics reads.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`dlock_acquire_duration_seconds_count{dlock_backend="redislock",dlock_key_group="billing",dlock_mode="wait",dlock_outcome="acquired",dlock_primitive="mutex",otel_scope_name="github.com/dlock-go/dlock/dlockotel",otel_scope_schema_url="",otel_scope_version="0.1.0"} %d`, contenders*rounds)
	if !strings.Contains(string(body), want) {
		t.Errorf("scrape lacks %s", want)
	}
	if !strings.Contains(string(body), "dlock_wakeups_total{") {
		t.Error("no wake-up counted in a contended run")
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "dlock_") {
			t.Log(line)
		}
	}
}
