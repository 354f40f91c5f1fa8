// Package sqlfence shows how a SQL table applies dlock fencing tokens: a
// fence_token column holds the token of the last write to each row, and every
// write under the lock carries its token in the WHERE clause, so the database
// itself refuses a holder whose token is older than the newest write. The check
// and the write are one statement; no transaction or read is needed.
//
//	CREATE TABLE accounts (
//	    id          INTEGER PRIMARY KEY,
//	    balance     INTEGER NOT NULL,
//	    fence_token INTEGER NOT NULL DEFAULT 0
//	);
//
//	UPDATE accounts SET balance = balance - $1, fence_token = $2
//	 WHERE id = $3 AND fence_token <= $2;
//
// Zero rows affected means a newer holder already wrote the row (or the row does
// not exist): the stale holder's work is dropped, nothing changed.
package sqlfence

import (
	"context"
	"database/sql"
	"fmt"
	"math"

	"github.com/dlock-go/dlock"
)

// Schema creates the accounts table of the example.
const Schema = `CREATE TABLE IF NOT EXISTS accounts (
	id          INTEGER PRIMARY KEY,
	balance     INTEGER NOT NULL,
	fence_token INTEGER NOT NULL DEFAULT 0
)`

// Withdraw subtracts amount from the balance of account if token is not older
// than the token of the last write to that row, and records token. It returns an
// error matching dlock.ErrStaleToken when a newer token has written the row or the
// row is missing, and dlock.ErrInvalid for a zero token or one beyond the range of
// a SQL BIGINT.
func Withdraw(ctx context.Context, db *sql.DB, token uint64, account, amount int64) error {
	if token == 0 || token > math.MaxInt64 {
		return fmt.Errorf("%w: fencing token %d", dlock.ErrInvalid, token)
	}
	res, err := db.ExecContext(ctx,
		`UPDATE accounts SET balance = balance - ?, fence_token = ?
		 WHERE id = ? AND fence_token <= ?`,
		amount, int64(token), account, int64(token))
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("account %d: %w", account, dlock.ErrStaleToken)
	}
	return nil
}
