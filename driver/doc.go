// Package driver is the contract between dlock's Client and a lock store, as
// database/sql/driver is between database/sql and a database: programs that take
// locks never import it; a backend package implements it, and dlock.NewClient
// turns any Driver into a Client with waiting, renewal, loss signals and the
// Observer hook, the same way for every store.
//
// A Driver makes single attempts of four operations in one store, and nothing
// else (no waiting, no retrying, no timers):
//
//	g, err := d.Acquire(ctx, driver.AcquireRequest{Key: "jobs:nightly", Owner: owner, TTL: 10 * time.Second})
//	var taken *driver.Taken
//	if errors.As(err, &taken) {
//		// another owner holds the key; taken.Remaining says for how long
//	}
//	h := driver.Holding{Key: "jobs:nightly", Owner: owner, TTL: 10 * time.Second, Handle: g.Handle}
//	ttl, err := d.Extend(ctx, h, 10*time.Second) // only while owner holds it
//	err = d.Release(ctx, h)                      // ErrNotHeld when it does not
//
// Acquire's token (Grant.Token) is strictly greater than every token the store
// handed out for the key before, whatever happened in between (expiries,
// restarts, failovers the store survives): it is the fencing token users
// present to the resources they protect.
//
// Optional interfaces add what a store can do beyond the four operations:
// Notifier (wake waiters when a key is released instead of polling), Abandoner
// (clean up an acquisition whose reply was lost), BatchExtender (renew many
// holdings in one round trip), KeyWatcher, TTLLimiter, Inspector (list, inspect
// and force-release locks for operators), SyncDriver (latches and barriers).
// The Client checks for each with a type assertion.
//
// Errors wrap the dlock sentinels the Client acts on: a *Taken from Acquire
// when the key is held, ErrNotHeld, ErrConflict, ErrUnavailable for failures
// that waiting may cure, ErrRefused for those it does not. docs/backends.md
// walks through writing a backend, and package dlocktest is the conformance
// suite every Driver runs against itself.
package driver
