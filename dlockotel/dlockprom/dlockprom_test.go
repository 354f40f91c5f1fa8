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
		t.Fatalf("New(nil): %v, want ErrInvalid", err)
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
