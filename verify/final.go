package verify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// finalReads reads the resource of every key once, after the workers ended,
// and records each read with rec (the harness's): the history's last word on
// each key, so that an acknowledged write that the resource lost shows (see
// LostWrite and Linearizable).
func finalReads(rec *Recorder, resource *redis.Options, keys []string) {
	res := redis.NewClient(resource)
	defer res.Close()
	for _, k := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		readResource(ctx, rec, res, k, 0)
		cancel()
	}
}
