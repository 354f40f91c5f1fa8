// Command handoff measures a hand-off round trip on a server it starts
// (redis-server, five of them for Redlock, PostgreSQL, MariaDB, etcd or an
// embedded NATS server, whose mutex or fair lock it takes; or memlock): one Client takes a lock and detaches it,
// another Client (a connection of its own, as in another process) resumes it
// from the reference; it prints the medians of Detach and of Resume, and of a
// TryLock on the same connection for scale.
//
//	go run ./handoff [-backend redis|redlock|postgres|mysql|mysql-fair|etcd|nats|nats-fair|memlock] [-n 200]
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/etcdlock"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/memlock"
	"github.com/dlock-go/dlock/mysqllock"
	"github.com/dlock-go/dlock/natslock"
	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/dlock-go/dlock/pglock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/dlock-go/dlock/redlock"
	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	backend := flag.String("backend", "redis", "the store: redis, redlock (5 masters), postgres, mysql, mysql-fair (MariaDB), etcd, nats, nats-fair or memlock")
	n := flag.Int("n", 200, "hand-offs")
	flag.Parse()
	dir, err := os.MkdirTemp("", "dlock-handoff")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var newClient func() (*dlock.Client, error)
	switch *backend {
	case "redis":
		srv, err := testserver.NewRedis(dir)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		newClient = func() (*dlock.Client, error) {
			return redislock.New(redis.NewClient(&redis.Options{Addr: srv.Addr}))
		}
	case "postgres":
		srv, err := testserver.NewPostgres(dir)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Remove()
		newClient = func() (*dlock.Client, error) {
			pool, err := pgxpool.New(context.Background(), srv.URL)
			if err != nil {
				return nil, err
			}
			d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
			if err != nil {
				return nil, err
			}
			return dlock.NewClient(d)
		}
	case "etcd":
		srv, err := testserver.NewEtcd(dir)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		newClient = func() (*dlock.Client, error) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				return nil, err
			}
			return etcdlock.New(cli)
		}
	case "nats", "nats-fair":
		srv, err := natstest.Start(dir, natstest.Options{SyncAlways: true})
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Shutdown()
		newClient = func() (*dlock.Client, error) {
			nc, err := nats.Connect(srv.URL)
			if err != nil {
				return nil, err
			}
			js, err := jetstream.New(nc)
			if err != nil {
				return nil, err
			}
			var d interface {
				driver.Driver
				Migrate(context.Context) error
			}
			if *backend == "nats" {
				d, err = natslock.NewDriver(js)
			} else {
				d, err = natslock.NewFairDriver(js)
			}
			if err == nil {
				err = d.Migrate(context.Background())
			}
			if err != nil {
				return nil, err
			}
			return dlock.NewClient(d)
		}
	case "redlock":
		var nodes []redis.UniversalClient
		for i := range 5 {
			sub := filepath.Join(dir, fmt.Sprint("node", i))
			if err := os.MkdirAll(sub, 0o755); err != nil {
				log.Fatal(err)
			}
			srv, err := testserver.NewRedis(sub)
			if err != nil {
				log.Fatal(err)
			}
			defer srv.Stop()
			nodes = append(nodes, redis.NewClient(&redis.Options{Addr: srv.Addr}))
		}
		newClient = func() (*dlock.Client, error) { return redlock.New(nodes) }
	case "mysql", "mysql-fair":
		// The server stops under the driver's idle connections at the end.
		_ = mysql.SetLogger(log.New(io.Discard, "", 0))
		srv, err := testserver.NewMariaDB(dir)
		if err != nil {
			log.Fatal(err)
		}
		defer srv.Stop()
		newClient = func() (*dlock.Client, error) {
			db, err := sql.Open("mysql", srv.DSN)
			if err != nil {
				return nil, err
			}
			if *backend == "mysql" {
				d, err := mysqllock.NewDriver(db, mysqllock.WithCreateTable())
				if err != nil {
					return nil, err
				}
				return dlock.NewClient(d)
			}
			d, err := mysqllock.NewFairDriver(db, mysqllock.WithCreateTable())
			if err != nil {
				return nil, err
			}
			return dlock.NewClient(d)
		}
	case "memlock":
		st := memlock.NewStore()
		newClient = func() (*dlock.Client, error) { return memlock.New(st) }
	default:
		log.Fatalf("unknown backend %q (redis, redlock, postgres, mysql, mysql-fair, etcd, nats, nats-fair or memlock)", *backend)
	}
	from, err := newClient()
	if err != nil {
		log.Fatal(err)
	}
	to, err := newClient()
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	var lock, detach, resume []time.Duration
	for i := range *n + 1 {
		key := fmt.Sprintf("handoff-%d-%d", os.Getpid(), i)
		t0 := time.Now()
		l, err := from.TryLock(ctx, key, dlock.WithTTL(10*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		t1 := time.Now()
		ref, err := l.Detach()
		if err != nil {
			log.Fatal(err)
		}
		t2 := time.Now()
		r, err := to.Resume(ctx, ref)
		if err != nil {
			log.Fatal(err)
		}
		t3 := time.Now()
		if r.Token() != l.Token() {
			log.Fatalf("resumed token %d, want %d", r.Token(), l.Token())
		}
		if err := r.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
		if i > 0 { // the first loads the scripts and opens the connections
			lock, detach, resume = append(lock, t1.Sub(t0)), append(detach, t2.Sub(t1)), append(resume, t3.Sub(t2))
		}
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	fmt.Printf("%s: %d hand-offs: Detach %v, Resume %v, TryLock %v (medians)\n", *backend, *n, med(detach), med(resume), med(lock))
}
