// Package dlockprom exposes dlock's metrics (see dlockotel) to Prometheus,
// through the OpenTelemetry Prometheus exporter, on a Registerer the program
// passes: never the global registry.
//
//	reg := prometheus.NewRegistry()
//	obs, mp, _ := dlockprom.New(reg)
//	defer mp.Shutdown(ctx)
//	locker, _ := redislock.New(rdb, dlock.WithObserver(obs))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
package dlockprom

import (
	"context"
	"fmt"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// New returns a dlockotel.Observer whose metrics are collected by reg, and the
// MeterProvider that records them: shut it down (MeterProvider.Shutdown) when
// the program stops, which unregisters nothing but stops the recording. opts
// are dlockotel's (WithKeyGroup, WithRawKey, WithTracerProvider);
// WithMeterProvider is overridden. The metric names follow the exporter's
// translation: dlock.acquire.duration becomes dlock_acquire_duration_seconds.
// There is no target_info metric, so that reg may also collect the program's
// own OpenTelemetry exporter.
// It returns an error matching dlock.ErrInvalid for a nil reg or a reg that
// already has an Observer of New (its metrics would be collected twice, and
// every scrape would fail), leaving reg as it was, and the exporter's error
// when it cannot register. Each New needs a registry of its own, or a
// distinct prefix or label (prometheus.WrapRegistererWith...).
func New(reg prometheus.Registerer, opts ...dlockotel.Option) (*dlockotel.Observer, *sdkmetric.MeterProvider, error) {
	if reg == nil {
		return nil, nil, fmt.Errorf("dlockprom: nil Registerer: %w", dlock.ErrInvalid)
	}
	// The exporter's collector describes no metric, so reg cannot tell a
	// second one from the first; this one describes a name of its own (it
	// collects nothing), which reg refuses to take twice.
	g := guard{}
	if err := reg.Register(g); err != nil {
		return nil, nil, fmt.Errorf("dlockprom: the Registerer already has dlock's metrics: %w: %w", dlock.ErrInvalid, err)
	}
	// No target_info: the program's own exporter on reg may have it already,
	// and a second one would fail every scrape.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutTargetInfo())
	if err != nil {
		reg.Unregister(g)
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	obs, err := dlockotel.New(append(opts, dlockotel.WithMeterProvider(mp))...)
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, nil, err
	}
	return obs, mp, nil
}

var guardDesc = prometheus.NewDesc("dlock_observer", "Registered by dlockprom.New, one per registry; never collected.", nil, nil)

// guard is a Collector that describes guardDesc and collects nothing.
type guard struct{}

func (guard) Describe(ch chan<- *prometheus.Desc) { ch <- guardDesc }
func (guard) Collect(chan<- prometheus.Metric)    {}
