package sqlfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/examples/sqlfence"
	"github.com/dlock-go/dlock/internal/testserver"
	"github.com/dlock-go/dlock/redislock"
	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"
)

var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(testserver.Main(m, func(r *testserver.Redis) { redisAddr = r.Addr }))
}

func openDB(dir string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dir+"/bank.db")
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(sqlfence.Schema); err != nil {
		db.Close()
		return nil, err
	}
	_, err = db.Exec(`INSERT INTO accounts (id, balance) VALUES (1, 100)`)
	return db, err
}

// A holder whose lease ran out (as after a long pause) cannot withdraw after the
// holder that came next: the database refuses its older token. It needs a
// redis-server on 127.0.0.1:6379, so it is not run as a test (TestWithdraw
// checks the same).
func ExampleWithdraw() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "bank.db")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.Exec(sqlfence.Schema); err != nil {
		panic(err)
	}
	if _, err := db.Exec(`INSERT INTO accounts (id, balance) VALUES (1, 100)`); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, _ := redislock.New(rdb)

	first, _ := locker.TryLock(ctx, "account:1", dlock.WithTTL(300*time.Millisecond))
	<-first.Done() // first pauses past its TTL ...

	second, _ := locker.Lock(ctx, "account:1") // ... and second takes over
	defer second.Unlock(ctx)
	fmt.Println("second:", sqlfence.Withdraw(ctx, db, second.Token(), 1, 30))

	err = sqlfence.Withdraw(ctx, db, first.Token(), 1, 30) // first wakes up
	fmt.Println("first refused:", errors.Is(err, dlock.ErrStaleToken))

	var balance int64
	_ = db.QueryRow(`SELECT balance FROM accounts WHERE id = 1`).Scan(&balance)
	fmt.Println("balance:", balance)
	// It prints:
	// second: <nil>
	// first refused: true
	// balance: 70
}

func TestWithdraw(t *testing.T) {
	ctx := context.Background()
	db, err := openDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Integers, not strings: 10 is newer than 9.
	for _, tok := range []uint64{9, 10, 10} {
		if err := sqlfence.Withdraw(ctx, db, tok, 1, 1); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	if err := sqlfence.Withdraw(ctx, db, 9, 1, 1); !errors.Is(err, dlock.ErrStaleToken) {
		t.Fatalf("stale token 9 after 10: %v, want ErrStaleToken", err)
	}
	for _, tok := range []uint64{0, 1 << 63} {
		if err := sqlfence.Withdraw(ctx, db, tok, 1, 1); !errors.Is(err, dlock.ErrInvalid) {
			t.Fatalf("token %d: %v, want ErrInvalid", tok, err)
		}
	}
	var balance, fence int64
	if err := db.QueryRow(`SELECT balance, fence_token FROM accounts WHERE id = 1`).Scan(&balance, &fence); err != nil {
		t.Fatal(err)
	}
	if balance != 97 || fence != 10 {
		t.Fatalf("balance %d, fence_token %d; want 97 and 10", balance, fence)
	}
}
