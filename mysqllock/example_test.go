package mysqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/mysqllock"
	_ "github.com/go-sql-driver/mysql"
)

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	locker, err := mysqllock.New(db, dlock.WithTTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	err = dlock.Do(ctx, locker, "example:report", func(ctx context.Context) error {
		fmt.Println("writing the report alone")
		return nil
	})
	fmt.Println("done:", err)
	// It prints:
	// writing the report alone
	// done: <nil>
}

func ExampleDriver_Fence() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	d, err := mysqllock.NewDriver(db, mysqllock.WithCreateTable())
	if err != nil {
		fmt.Println(err)
		return
	}
	locker, _ := mysqllock.NewClient(d)
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS example_balance (id INT PRIMARY KEY, cents BIGINT)`); err != nil {
		fmt.Println(err)
		return
	}
	lease, err := locker.Lock(ctx, "example:account:1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = lease.Unlock(ctx) }()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = tx.Rollback() }()
	// Check the lease and keep the lock from changing hands until the
	// transaction ends.
	err = d.Fence(ctx, tx, lease)
	if err == nil {
		_, err = tx.ExecContext(ctx, `INSERT INTO example_balance VALUES (1, 100)
			ON DUPLICATE KEY UPDATE cents = cents + 100`)
	}
	if err == nil {
		err = tx.Commit()
	}
	fmt.Println("committed:", err == nil, "lease lost:", errors.Is(err, dlock.ErrNotHeld))
	// It prints:
	// committed: true lease lost: false
}

func ExampleNewFair() {
	db, err := sql.Open("mysql", "app:secret@tcp(127.0.0.1:3306)/app")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	// Waiters for a key get it in the order they came (NewFair is the same
	// over the DefaultTable); a TryLock does not pass them.
	f, err := mysqllock.NewFairDriver(db, mysqllock.WithCreateTable())
	if err != nil {
		fmt.Println(err)
		return
	}
	locker, _ := dlock.NewClient(f, dlock.WithTTL(10*time.Second))
	lease, err := locker.Lock(context.Background(), "example:release-train", dlock.WithWait(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = lease.Unlock(context.Background()) }()
	info, err := f.Inspect(context.Background(), "example:release-train")
	fmt.Println(info.Kind, "lock held:", info.Held, "waiters:", info.Waiters, err)
	// It prints:
	// fair lock held: true waiters: 0 <nil>
}
