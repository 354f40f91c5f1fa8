package dlockprom_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel/dlockprom"
	"github.com/dlock-go/dlock/memlock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A service that serves its lock metrics on /metrics, from a registry of its own.
func Example() {
	reg := prometheus.NewRegistry()
	obs, mp, err := dlockprom.New(reg)
	if err != nil {
		log.Fatal(err)
	}
	defer mp.Shutdown(context.Background())

	locks, err := memlock.New(memlock.NewStore(), dlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := locks.TryLock(ctx, "orders:42")
	if err != nil {
		log.Fatal(err)
	}
	_ = lease.Unlock(ctx)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux) // a real service: http.ListenAndServe(":9090", mux)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "dlock_acquire_duration_seconds_count") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// dlock_acquire_duration_seconds_count{dlock_backend="memlock",dlock_key_group="orders",dlock_mode="try",dlock_outcome="acquired",dlock_primitive="mutex",otel_scope_name="github.com/dlock-go/dlock/dlockotel",otel_scope_schema_url="",otel_scope_version="0.1.0"} 1
}
