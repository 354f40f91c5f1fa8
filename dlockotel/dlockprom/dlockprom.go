// Package dlockprom exposes dlock's metrics (see dlockotel) to Prometheus,
// through the OpenTelemetry Prometheus exporter, on a Registerer the program
// passes: never the global registry.
package dlockprom

import (
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
// It returns an error matching dlock.ErrInvalid for a nil reg, or an error when the collector cannot register
// (a second New on the same reg).
func New(reg prometheus.Registerer, opts ...dlockotel.Option) (*dlockotel.Observer, *sdkmetric.MeterProvider, error) {
	if reg == nil {
		return nil, nil, fmt.Errorf("%w: dlockprom: nil Registerer", dlock.ErrInvalid)
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp))
	obs, err := dlockotel.New(append(opts, dlockotel.WithMeterProvider(mp))...)
	if err != nil {
		return nil, nil, err
	}
	return obs, mp, nil
}
