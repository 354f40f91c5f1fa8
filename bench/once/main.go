// Command once measures dlock.Once on a redis-server it starts: G callers,
// each with a Client (and a connection) of its own, ask for one key at once;
// it reports how many computations ran and the callers' waits against the
// computation's time, medians over the rounds.
//
//	go run ./once [-g 64] [-compute 200ms] [-rounds 5]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

func main() {
	g := flag.Int("g", 64, "concurrent callers, a Client each")
	compute := flag.Duration("compute", 200*time.Millisecond, "the computation's time")
	rounds := flag.Int("rounds", 5, "rounds, each on a new key")
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-once")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := testserver.NewRedis(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	clients := make([]*dlock.Client, *g)
	for i := range clients {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2})
		defer rdb.Close()
		if clients[i], err = redislock.New(rdb); err != nil {
			log.Fatal(err)
		}
	}
	var p50s, p99s []time.Duration
	var runs atomic.Int32
	for r := range *rounds {
		key := fmt.Sprintf("once-bench-%d-%d", os.Getpid(), r)
		waits := make([]time.Duration, *g)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				t0 := time.Now()
				_, err := dlock.Once{Client: clients[i]}.Do(context.Background(), key, func(ctx context.Context) ([]byte, error) {
					runs.Add(1)
					time.Sleep(*compute)
					return []byte("value"), nil
				})
				if err != nil {
					log.Fatal(err)
				}
				waits[i] = time.Since(t0)
			}()
		}
		close(start)
		wg.Wait()
		slices.Sort(waits)
		p50s = append(p50s, waits[len(waits)/2])
		p99s = append(p99s, waits[(len(waits)*99)/100])
	}
	slices.Sort(p50s)
	slices.Sort(p99s)
	fmt.Printf("G=%d callers, computation %v: %d computations in %d rounds; wait p50 %v (%.2fx), p99 %v (%.2fx) (medians of the rounds)\n",
		*g, *compute, runs.Load(), *rounds, p50s[len(p50s)/2].Round(time.Millisecond), float64(p50s[len(p50s)/2])/float64(*compute),
		p99s[len(p99s)/2].Round(time.Millisecond), float64(p99s[len(p99s)/2])/float64(*compute))
}
