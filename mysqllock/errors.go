package mysqllock

import (
	"context"
	"errors"
	"fmt"

	dl "github.com/dlock-go/dlock/driver"
	"github.com/go-sql-driver/mysql"
)

// ErrNoTable is matched (with dlock.ErrRefused) by the error of a call that
// finds a table it reads missing and may not create it: an inspection
// (Inspect, List, ForceUnlock), which never creates one, or a call of a Driver
// without WithCreateTable. Driver.Migrate creates the tables.
var ErrNoTable = errors.New("no dlock table")

// ErrPermission is matched (with dlock.ErrRefused) by the error of a call
// that the server refused for want of a privilege: the user needs SELECT,
// INSERT and UPDATE on the Driver's tables (and CREATE for Migrate).
var ErrPermission = errors.New("permission denied")

// The server's error numbers that the Driver tells apart.
const (
	errNoSuchTable   = 1146 // ER_NO_SUCH_TABLE
	errUnknownThread = 1094 // ER_NO_SUCH_THREAD: KILL of a connection that is gone
	errBadField      = 1054 // ER_BAD_FIELD_ERROR: a table of another shape
	errDataTooLong   = 1406 // ER_DATA_TOO_LONG
	errInterrupted   = 1317 // ER_QUERY_INTERRUPTED
)

// errorNumber returns the number of a server error in err, or 0.
func errorNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// permissionDenied reports whether a server error number refuses a privilege.
func permissionDenied(n uint16) bool {
	switch n {
	case 1044, // ER_DBACCESS_DENIED_ERROR
		1045, // ER_ACCESS_DENIED_ERROR
		1095, // ER_KILL_DENIED_ERROR
		1142, // ER_TABLEACCESS_DENIED_ERROR
		1143, // ER_COLUMNACCESS_DENIED_ERROR
		1227, // ER_SPECIFIC_ACCESS_DENIED_ERROR
		1370, // ER_PROCACCESS_DENIED_ERROR
		1698: // ER_ACCESS_DENIED_NO_PASSWORD_ERROR
		return true
	}
	return false
}

// transient reports whether a server error number means that waiting may
// cure the error.
func transient(n uint16) bool {
	switch n {
	case 1040, // ER_CON_COUNT_ERROR: too many connections
		1053, // ER_SERVER_SHUTDOWN
		1205, // ER_LOCK_WAIT_TIMEOUT: a transaction fenced on the key
		1213, // ER_LOCK_DEADLOCK
		1290, // ER_OPTION_PREVENTS_STATEMENT: --read-only, a replica after a failover
		1792, // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
		1836, // ER_READ_ONLY_MODE
		errInterrupted,
		1927, // ER_CONNECTION_KILLED (MariaDB)
		3024, // ER_QUERY_TIMEOUT (MySQL)
		1969: // ER_STATEMENT_TIMEOUT (MariaDB)
		return true
	}
	return false
}

// mapErr turns the error of one request into one matching the dlock
// sentinels, the cause wrapped: the end of ctx as it is; the request timeout
// (rctx's end), network failures, and server errors that mean "not now"
// (shutdown, a read-only server after a failover, lock waits, deadlocks) as
// dlock.ErrUnavailable; a table of another shape as dlock.ErrConflict; a
// value too long for its column as dlock.ErrInvalid; a missing privilege as
// ErrPermission and a missing table as ErrNoTable, both with dlock.ErrRefused;
// every other server error as dlock.ErrRefused.
func (d *Driver) mapErr(ctx, rctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, dl.ErrInvalid) || errors.Is(err, dl.ErrConflict) || errors.Is(err, dl.ErrUnavailable) || errors.Is(err, dl.ErrRefused) {
		return err
	}
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("mysqllock: %s: %w", op, cerr)
	}
	if rctx.Err() != nil {
		return errors.Join(dl.ErrUnavailable, fmt.Errorf("mysqllock: %s: no answer within %v: %w", op, d.cfg.requestTimeout, err))
	}
	n := errorNumber(err)
	switch {
	case n == 0: // the network, a connection that broke (driver.ErrBadConn, mysql.ErrInvalidConn)
		return errors.Join(dl.ErrUnavailable, fmt.Errorf("mysqllock: %s: %w", op, err))
	case n == errNoSuchTable:
		return errors.Join(dl.ErrRefused, fmt.Errorf("mysqllock: %s: %w %s in this database (Driver.Migrate, or a lock with WithCreateTable, creates it): %w", op, ErrNoTable, d.cfg.table, err))
	case permissionDenied(n):
		return errors.Join(dl.ErrRefused, fmt.Errorf("mysqllock: %s: %w on %s: %w", op, ErrPermission, d.cfg.table, err))
	case n == errBadField || n == 1364 || n == 1366 || n == 1264:
		return errors.Join(dl.ErrConflict, fmt.Errorf("mysqllock: %s: %s is not a dlock table: %w", op, d.table, err))
	case n == errDataTooLong:
		return fmt.Errorf("%w: mysqllock: %s: a value is longer than its column of %s: %w", dl.ErrInvalid, op, d.table, err)
	case transient(n):
		return errors.Join(dl.ErrUnavailable, fmt.Errorf("mysqllock: %s: %w", op, err))
	}
	return errors.Join(dl.ErrRefused, fmt.Errorf("mysqllock: %s: %w", op, err))
}
