package dlockotel_test

import (
	"context"
	"log"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/memlock"
)

// Wiring: one Observer as the Client's default. Without options it records with
// the global MeterProvider and TracerProvider (otel.SetMeterProvider...).
func ExampleNew() {
	obs, err := dlockotel.New(
		// Metrics name keys by group: "tenant-7/report" gives "tenant-7".
		dlockotel.WithKeyGroup(func(key string) string { group, _, _ := strings.Cut(key, "/"); return group }),
	)
	if err != nil {
		log.Fatal(err)
	}
	locks, err := memlock.New(memlock.NewStore(), dlock.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background() // a span in ctx becomes the parent of dlock.acquire and dlock.hold
	lease, err := locks.Lock(ctx, "tenant-7/report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// Output:
}
