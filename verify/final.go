package verify

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// finalReads reads the resource of every key, after the workers ended,
// and records each read with rec (the harness's): the history's last word on
// each key, so that an acknowledged write that the resource lost shows (see
// LostWrite and Linearizable).
func finalReads(rec *Recorder, resource *redis.Options, keys []string) {
	res := redis.NewClient(resource)
	defer res.Close()
	for _, k := range keys {
		// A read that fails is tried again, a few times: a key whose final
		// reads all failed fails lost-write (see LostWrite).
		for try := 0; try < finalTries; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, ok := readResource(ctx, rec, res, k, 0)
			cancel()
			if ok {
				break
			}
			time.Sleep(200 * time.Millisecond) // the resource's server, restarting or busy
		}
	}
}

// finalTries is how many times a final read is tried.
const finalTries = 5
