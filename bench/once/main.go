// Command once measures dlock.Once on a server it starts (redis-server,
// PostgreSQL or etcd) or on memlock: G callers, each with a Client (and a connection) of its
// own, ask for one key at once; it reports how many computations ran and the
// callers' waits against the computation's time, medians over the rounds.
//
//	go run ./once [-backend redis|postgres|etcd|memlock] [-g 64] [-compute 200ms] [-rounds 5]
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
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// open starts the server of backend under dir and returns a function that
// makes a Client on a connection of its own, and one that stops the server.
func open(backend, dir string) (newClient func() (*dlock.Client, error), stop func(), err error) {
	switch backend {
	case "redis":
		srv, err := testserver.NewRedis(dir)
		if err != nil {
			return nil, nil, err
		}
		return func() (*dlock.Client, error) {
			return redislock.New(redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 2}))
		}, srv.Stop, nil
	case "postgres":
		srv, err := testserver.NewPostgres(dir)
		if err != nil {
			return nil, nil, err
		}
		return func() (*dlock.Client, error) {
			pool, err := pgxpool.New(context.Background(), srv.URL+"&pool_max_conns=2")
			if err != nil {
				return nil, err
			}
			d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
			if err != nil {
				return nil, err
			}
			return dlock.NewClient(d)
		}, srv.Remove, nil
	case "etcd":
		srv, err := testserver.NewEtcd(dir)
		if err != nil {
			return nil, nil, err
		}
		return func() (*dlock.Client, error) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second})
			if err != nil {
				return nil, err
			}
			return etcdlock.New(cli)
		}, srv.Stop, nil
	case "memlock":
		// One store in this process, a Client of its own per caller.
		st := memlock.NewStore()
		return func() (*dlock.Client, error) { return memlock.New(st) }, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q (redis, postgres, etcd or memlock)", backend)
}

func main() {
	backend := flag.String("backend", "redis", "the store: redis, postgres, etcd or memlock")
	g := flag.Int("g", 64, "concurrent callers, a Client each")
	compute := flag.Duration("compute", 200*time.Millisecond, "the computation's time")
	rounds := flag.Int("rounds", 5, "rounds, each on a new key")
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-once")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	newClient, stop, err := open(*backend, dir)
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	clients := make([]*dlock.Client, *g)
	for i := range clients {
		if clients[i], err = newClient(); err != nil {
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
	fmt.Printf("%s: G=%d callers, computation %v: %d computations in %d rounds; wait p50 %v (%.2fx), p99 %v (%.2fx) (medians of the rounds)\n",
		*backend, *g, *compute, runs.Load(), *rounds, p50s[len(p50s)/2].Round(time.Millisecond), float64(p50s[len(p50s)/2])/float64(*compute),
		p99s[len(p99s)/2].Round(time.Millisecond), float64(p99s[len(p99s)/2])/float64(*compute))
}
