package dlockk8s_test

import (
	"context"
	"fmt"
	"time"

	"github.com/dlock-go/dlock/dlockk8s"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// A controller elects its leader through Redis: client-go's LeaderElector
// with a dlockk8s.Lock in place of a Lease object. A controller-runtime
// manager takes the same Lock as its LeaderElectionResourceLockInterface.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true}) // the shared Redis
	defer rdb.Close()
	store, _ := redislock.NewOptimistic(rdb, 0)
	lock, _ := dlockk8s.New(store, "example-controller", resourcelock.ResourceLockConfig{Identity: "pod-a"})

	ctx, cancel := context.WithCancel(context.Background())
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				fmt.Println(lock.Identity(), "leads")
				cancel() // the controller's work would run here until ctx ends
			},
			OnStoppedLeading: func() { fmt.Println(lock.Identity(), "stopped leading") },
		},
	})
	if err != nil {
		panic(err)
	}
	le.Run(ctx)
	// It prints:
	// pod-a leads
	// pod-a stopped leading
}
