package pglock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"
	"github.com/jackc/pgx/v5/pgconn"
)

// sqlState returns the SQLSTATE of a server error in err, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// connectionGone reports whether err says that the server ended the
// connection (an administrator's pg_terminate_backend, a shutdown) or that the
// request could not have been sent.
func connectionGone(err error) bool {
	switch sqlState(err) {
	case "57P01", "57P02":
		return true
	}
	return pgconn.SafeToRetry(err)
}

// ErrNoTable is matched (with dlock.ErrRefused) by the error of a call that
// finds a table it reads missing and may not create it: an inspection
// (Inspect, List, ForceUnlock), which never creates one, or a call of a Driver
// without WithCreateTable. Driver.Migrate creates the tables.
var ErrNoTable = errors.New("no dlock table")

// undefinedTable reports whether err says that a table or sequence is missing.
func undefinedTable(err error) bool { return sqlState(err) == "42P01" }

// ErrOldLayout is matched (with dlock.ErrRefused) by the error of a call on a
// locks' table made by an earlier version of pglock, which lacks a column
// this one needs, when the Driver may not change it (no WithCreateTable).
// Driver.Migrate adds the column, keeping every row; with
// WithCreateTable the first call that meets the old table does.
var ErrOldLayout = errors.New("dlock table of an earlier layout")

// addedColumns are the columns that later versions of pglock added to the
// locks' table.
var addedColumns = []string{"waited", "lock_delay", "delay_until", "waiters", "woken_until", "result", "result_until"}

// oldLayout reports whether err says that the locks' table lacks a column
// that a later version of pglock added to it.
func oldLayout(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42703" {
		return false
	}
	for _, c := range addedColumns {
		if strings.Contains(pe.Message, c) {
			return true
		}
	}
	return false
}

// mapErr turns the error of one request into one matching the dlock
// sentinels, the cause wrapped: the end of ctx as it is; the request timeout
// (rctx's end), network failures, and server errors that mean "not now"
// (shutdown, recovery, a read-only server after a failover, overload,
// serialization failures) as dlock.ErrUnavailable; a table of another shape as
// dlock.ErrConflict; every other server error (missing table, permissions,
// authentication) as dlock.ErrRefused.
func (d *Driver) mapErr(ctx, rctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, driver.ErrInvalid) || errors.Is(err, driver.ErrConflict) || errors.Is(err, driver.ErrUnavailable) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("pglock: %s: %w", op, cerr)
	}
	if rctx.Err() != nil {
		return errors.Join(driver.ErrUnavailable, fmt.Errorf("pglock: %s: no answer within %v: %w", op, d.cfg.requestTimeout, err))
	}
	code := sqlState(err)
	switch {
	case oldLayout(err):
		return errors.Join(driver.ErrRefused, fmt.Errorf("pglock: %s: %w: %s lacks a column of this version (%s; Driver.Migrate, or a lock with WithCreateTable, adds them): %w", op, ErrOldLayout, d.table, strings.Join(addedColumns, ", "), err))
	case code == "":
		return errors.Join(driver.ErrUnavailable, fmt.Errorf("pglock: %s: %w", op, err))
	case code == "42P01":
		return errors.Join(driver.ErrRefused, fmt.Errorf("pglock: %s: %w %s in this database (Driver.Migrate, or a lock with WithCreateTable, creates it): %w", op, ErrNoTable, d.cfg.table, err))
	case code == "42703" || code == "42804" || code == "42809" || code == "22P02":
		return errors.Join(driver.ErrConflict, fmt.Errorf("pglock: %s: %s is not a dlock table: %w", op, d.table, err))
	case transient(code):
		return errors.Join(driver.ErrUnavailable, fmt.Errorf("pglock: %s: %w", op, err))
	}
	return errors.Join(driver.ErrRefused, fmt.Errorf("pglock: %s: %w", op, err))
}

// transient reports whether a SQLSTATE means that waiting may cure the error.
func transient(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"), // insufficient resources
		strings.HasPrefix(code, "57"), // operator intervention: shutdown, cancel, cannot connect now
		strings.HasPrefix(code, "58"), // system error (I/O)
		strings.HasPrefix(code, "40"), // serialization failure, deadlock
		code == "55P03",               // lock not available
		code == "25006":               // read-only transaction: a standby, or a primary demoted by a failover
		return true
	}
	return false
}
