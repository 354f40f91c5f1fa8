package redislock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
)

// A holder that lost its lock (here: its lease simply ran out, as after a long
// pause) cannot write over the work of the holder that came after it.
func ExampleFence() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)
	fence, _ := redislock.NewFence(rdb)
	defer rdb.Del(ctx, "example:stock")

	first, _ := locker.TryLock(ctx, "example:stock-lock", dlock.WithTTL(300*time.Millisecond))
	_ = fence.Set(ctx, first, "example:stock", "10", 0)
	<-first.Done() // first pauses past its TTL ...

	second, _ := locker.Lock(ctx, "example:stock-lock") // ... and second takes over
	defer second.Unlock(ctx)
	n, _ := fence.IncrBy(ctx, second, "example:stock", -3)
	fmt.Println("second holder:", n)

	_, err := fence.IncrBy(ctx, first, "example:stock", -3) // first wakes up
	fmt.Println("first holder refused:", errors.Is(err, dlock.ErrStaleToken))
	fmt.Println("stock:", rdb.Get(ctx, "example:stock").Val())
	// Output:
	// second holder: 7
	// first holder refused: true
	// stock: 7
}

// The same fence on a SQL table: a fence_token column holds the token of the last
// write, and every write under the lock carries its token in the WHERE clause, so
// the database refuses a holder whose token is older than the newest write. The
// comparison is on integers in the database (BIGINT holds tokens below 2^63, which
// covers redislock's microsecond tokens for thousands of years).
//
//	CREATE TABLE accounts (
//	    id          BIGINT PRIMARY KEY,
//	    balance     BIGINT NOT NULL,
//	    fence_token BIGINT NOT NULL DEFAULT 0
//	);
//
// One row per fenced resource; an INSERT of a missing row uses
// ON CONFLICT (id) DO UPDATE ... WHERE accounts.fence_token <= EXCLUDED.fence_token.
// Zero rows affected means a newer holder already wrote: the work of this holder
// must be dropped (the equivalent of dlock.ErrStaleToken).
func Example_sqlFence() {
	var db *sql.DB // opened by the application: sql.Open("pgx", dsn), ...
	var lease *dlock.Lease
	withdraw := func(ctx context.Context, account, amount int64) error {
		res, err := db.ExecContext(ctx,
			`UPDATE accounts SET balance = balance - $1, fence_token = $2
			 WHERE id = $3 AND fence_token <= $2`,
			amount, int64(lease.Token()), account)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("account %d: %w", account, dlock.ErrStaleToken)
		}
		return nil
	}
	_ = withdraw
}
