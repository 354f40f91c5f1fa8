package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	locker, err := pglock.New(pool, dlock.WithTTL(10*time.Second))
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
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/postgres")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
	if err != nil {
		fmt.Println(err)
		return
	}
	locker, _ := pglock.NewClient(d)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS example_balance (id int PRIMARY KEY, cents bigint)`); err != nil {
		fmt.Println(err)
		return
	}
	lease, err := locker.Lock(ctx, "example:account:1")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = lease.Unlock(ctx) }()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Check the lease and keep the lock from changing hands until the
		// transaction ends.
		if err := d.Fence(ctx, tx, lease); err != nil {
			return err // the lease is gone: roll back
		}
		_, err := tx.Exec(ctx, `INSERT INTO example_balance VALUES (1, 100)
			ON CONFLICT (id) DO UPDATE SET cents = example_balance.cents + 100`)
		return err
	})
	fmt.Println("committed:", err == nil, "lease lost:", errors.Is(err, dlock.ErrNotHeld))
	// It prints:
	// committed: true lease lost: false
}
