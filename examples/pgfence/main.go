// Command pgfence is an order processor whose writes are fenced inside their
// own PostgreSQL transaction with pglock: a processor that was paused past
// its lease (a GC pause, a stopped VM, SIGSTOP) and wakes up after the next
// processor took over cannot commit its stale work.
//
//	go run . -postgres postgres://user@localhost/db   (or $DLOCK_POSTGRES)
//
// It creates the tables pgfence_orders and dlock_locks if they do not exist,
// and plays the scenario once on order 1.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	url := flag.String("postgres", os.Getenv("DLOCK_POSTGRES"), "PostgreSQL URL (default $DLOCK_POSTGRES)")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "pgfence: give a PostgreSQL URL with -postgres or DLOCK_POSTGRES")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Run(ctx, *url, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "pgfence:", err)
		os.Exit(1)
	}
}

// Schema is the orders table of the example.
const Schema = `CREATE TABLE IF NOT EXISTS pgfence_orders (
	id         int PRIMARY KEY,
	status     text NOT NULL,
	shipped_by bigint -- the fencing token of the processor that shipped it
)`

// processor is one process of the order service: its own pool and lock client.
type processor struct {
	name   string
	pool   *pgxpool.Pool
	driver *pglock.Driver
	locker *pglock.Client
}

func newProcessor(ctx context.Context, name, url string) (*processor, error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, err
	}
	d, err := pglock.NewDriver(pool, pglock.WithCreateTable())
	if err != nil {
		pool.Close()
		return nil, err
	}
	c, err := pglock.NewClient(d, dlock.WithTTL(500*time.Millisecond))
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &processor{name: name, pool: pool, driver: d, locker: c}, nil
}

// status reads the order's status.
func (p *processor) status(ctx context.Context, order int) (string, error) {
	var status string
	err := p.pool.QueryRow(ctx, `SELECT status FROM pgfence_orders WHERE id = $1`, order).Scan(&status)
	return status, err
}

// ship marks the order shipped in a transaction fenced by lease: the commit
// happens only if the lease still holds the order's lock in the database.
func (p *processor) ship(ctx context.Context, lease *dlock.Lease, order int) error {
	return pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE pgfence_orders SET status = 'shipped', shipped_by = $2 WHERE id = $1`,
			order, int64(lease.Token())); err != nil {
			return err
		}
		// Before the commit: nobody else can be granted the lock until this
		// transaction ends, and a lease that is gone fails here.
		return p.driver.Fence(ctx, tx, lease)
	})
}

// shipIfNew ships the order unless it was shipped already.
func (p *processor) shipIfNew(ctx context.Context, lease *dlock.Lease, order int) error {
	status, err := p.status(ctx, order)
	if err != nil || status != "new" {
		return err
	}
	return p.ship(ctx, lease, order)
}

// Run plays the scenario against the database at url and writes what happens
// to out: processor A takes order 1's lock and is paused past its lease;
// processor B takes the lock and ships the order; A wakes up and tries to
// ship it too, and its fenced transaction is refused.
func Run(ctx context.Context, url string, out io.Writer) error {
	a, err := newProcessor(ctx, "A", url)
	if err != nil {
		return err
	}
	defer a.pool.Close()
	b, err := newProcessor(ctx, "B", url)
	if err != nil {
		return err
	}
	defer b.pool.Close()
	if _, err := a.pool.Exec(ctx, Schema); err != nil {
		return err
	}
	if _, err := a.pool.Exec(ctx, `INSERT INTO pgfence_orders VALUES (1, 'new', NULL)
		ON CONFLICT (id) DO UPDATE SET status = 'new', shipped_by = NULL`); err != nil {
		return err
	}
	const key = "pgfence:order:1"

	leaseA, err := a.locker.TryLock(ctx, key)
	if err != nil {
		return err
	}
	status, err := a.status(ctx, 1)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "A holds the lock of order 1, reads it %s, and is paused before shipping it\n", status)

	bDone := make(chan error, 1)
	go func() {
		leaseB, err := b.locker.Lock(ctx, key, dlock.WithWait(10*time.Second))
		if err != nil {
			bDone <- err
			return
		}
		defer func() { _ = leaseB.Unlock(context.WithoutCancel(ctx)) }()
		fmt.Fprintln(out, "B holds the lock after A's lease ran out, and ships order 1")
		bDone <- b.shipIfNew(ctx, leaseB, 1)
	}()

	// A's pause: it does nothing until its lease has run out and B is done.
	<-leaseA.Done()
	if err := <-bDone; err != nil {
		return fmt.Errorf("processor B: %w", err)
	}
	// A wakes up and acts on what it read before the pause.
	err = a.ship(ctx, leaseA, 1)
	switch {
	case errors.Is(err, dlock.ErrNotHeld):
		fmt.Fprintf(out, "A wakes up and ships order 1: refused (stale token: %v), rolled back\n", errors.Is(err, dlock.ErrStaleToken))
	case err == nil:
		return errors.New("the stale commit of processor A went through")
	default:
		return fmt.Errorf("processor A: %w", err)
	}
	var by int64
	if err := a.pool.QueryRow(ctx, `SELECT shipped_by FROM pgfence_orders WHERE id = 1`).Scan(&by); err != nil {
		return err
	}
	fmt.Fprintf(out, "order 1 shipped once, by the holder of token %d (A's was %d)\n", by, leaseA.Token())
	return nil
}
