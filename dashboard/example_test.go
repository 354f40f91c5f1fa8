package dashboard_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dashboard"
	"github.com/dlock-go/dlock/memlock"
)

// A service mounts the live view of its locks on its admin port. Any
// dlock.Client is an Inspector; here the in-memory backend stands in for a
// Redis, etcd or ZooKeeper one.
func ExampleHandler() {
	store := memlock.NewStore()
	locks, err := memlock.New(store)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := locks.TryLock(context.Background(), "nightly-report", dlock.WithMetadata("report job"))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	admin := http.NewServeMux()
	admin.Handle("/debug/locks/", http.StripPrefix("/debug/locks", dashboard.Handler(locks, dashboard.Options{Title: "billing"})))
	srv := httptest.NewServer(admin) // on a real admin port: http.ListenAndServe("127.0.0.1:6060", admin)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/debug/locks/api/locks")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status, resp.Header.Get("Content-Type"))
	// Output: 200 OK application/json; charset=utf-8
}

// A Watcher feeds a view of one's own: here one line per held lock.
func ExampleWatcher() {
	store := memlock.NewStore()
	locks, _ := memlock.New(store)
	lease, err := locks.TryLock(context.Background(), "deploy:web", dlock.WithMetadata(`{"host":"ci-3","pid":77,"since":"2026-01-01T00:00:00Z","description":"deploy v42"}`))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	w, err := dashboard.NewWatcher(locks, dashboard.Options{Pattern: "deploy:*"})
	if err != nil {
		log.Fatal(err)
	}
	snap, err := w.Refresh(context.Background()) // or w.Run(ctx, func(dashboard.Snapshot) {...}) every interval
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range snap.Rows {
		fmt.Printf("%s %s held by %s, %d waiting\n", r.Key, r.Kind, r.Holder, r.Waiters)
	}
	// Output: deploy:web mutex held by ci-3 pid 77 "deploy v42", 0 waiting
}
