package dlock_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/memlock"
)

// Every replica asks for the same report at once; one computes it.
func ExampleOnce() {
	ctx := context.Background()
	store := memlock.NewStore()
	computed := 0
	var results []string
	for range 3 { // three replicas, one after another here
		c, _ := memlock.New(store)
		v, err := dlock.Once{Client: c, ResultTTL: time.Minute}.Do(ctx, "report:2026-12", func(ctx context.Context) ([]byte, error) {
			computed++
			return []byte("the report"), nil
		})
		if err != nil {
			panic(err)
		}
		results = append(results, string(v))
	}
	fmt.Println(computed, results)
	// Output: 1 [the report the report the report]
}
