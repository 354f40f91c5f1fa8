package mysqllock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
)

// The columns of the locks' table, which Migrate checks.
const lockColumns = "lock_key, owner, token, expires_at, metadata, st, lock_delay, delay_until, abandoned, abandoned_until, holder_conn, waiters"

// createStatements are the statements that create the Driver's tables when
// missing: the locks', the semaphores', the latches' and barriers', and the
// queue of the fair locks' waiters. Every
// table is InnoDB: its changes are transactional and, with durable commits,
// survive a crash of the server.
func (d *Driver) createStatements() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + d.table + ` (
	lock_key        VARBINARY(1024) NOT NULL PRIMARY KEY,
	owner           VARBINARY(255)  NOT NULL DEFAULT '',
	token           BIGINT          NOT NULL,
	expires_at      DATETIME(6)     NOT NULL,
	metadata        BLOB            NOT NULL,
	st              TINYINT         NOT NULL DEFAULT 0,
	lock_delay      BIGINT          NOT NULL DEFAULT 0,
	delay_until     DATETIME(6)     NOT NULL DEFAULT '1970-01-01 00:00:00',
	abandoned       VARBINARY(8192) NOT NULL DEFAULT '',
	abandoned_until DATETIME(6)     NOT NULL DEFAULT '1970-01-01 00:00:00',
	holder_conn     BIGINT          NOT NULL DEFAULT 0,
	waiters         VARBINARY(1024) NOT NULL DEFAULT ''
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + d.sem + ` (
	sem_key     VARBINARY(1024) NOT NULL,
	owner       VARBINARY(255)  NOT NULL,
	token       BIGINT          NOT NULL,
	expires_at  DATETIME(6)     NOT NULL,
	metadata    BLOB            NOT NULL,
	size        INT             NOT NULL DEFAULT 0,
	base        INT             NOT NULL DEFAULT 0,
	holder_conn BIGINT          NOT NULL DEFAULT 0,
	waiters     VARBINARY(1024) NOT NULL DEFAULT '',
	PRIMARY KEY (sem_key, owner)
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + d.sync + ` (
	kind       VARBINARY(8)    NOT NULL,
	name       VARBINARY(1024) NOT NULL,
	party      VARBINARY(255)  NOT NULL,
	n          INT             NOT NULL,
	count      INT             NOT NULL DEFAULT 0,
	open       TINYINT         NOT NULL DEFAULT 0,
	expires_at DATETIME(6)     NOT NULL,
	PRIMARY KEY (kind, name, party)
) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS ` + d.fair + ` (
	seq        BIGINT          NOT NULL AUTO_INCREMENT PRIMARY KEY,
	lock_key   VARBINARY(1024) NOT NULL,
	owner      VARBINARY(255)  NOT NULL,
	conn       BIGINT          NOT NULL DEFAULT 0,
	expires_at DATETIME(6)     NOT NULL,
	UNIQUE KEY by_owner (lock_key, owner),
	KEY by_seq (lock_key, seq)
) ENGINE=InnoDB`,
	}
}

// checkStatements read no row of each table but name every column of it: a
// table of another shape fails them.
func (d *Driver) checkStatements() []string {
	return []string{
		`SELECT ` + lockColumns + ` FROM ` + d.table + ` LIMIT 0`,
		`SELECT sem_key, owner, token, expires_at, metadata, size, base, holder_conn, waiters FROM ` + d.sem + ` LIMIT 0`,
		`SELECT kind, name, party, n, count, open, expires_at FROM ` + d.sync + ` LIMIT 0`,
		`SELECT seq, lock_key, owner, conn, expires_at FROM ` + d.fair + ` LIMIT 0`,
	}
}

// Migrate creates the Driver's tables (the locks', the semaphores', the
// latches' and barriers', and the fair locks' queue, in the database
// WithTable names or the connection's) if they do not exist, and checks that existing tables have
// the columns of dlock tables (dlock.ErrConflict when not). It is safe to run
// concurrently and on every start. The user needs the CREATE privilege;
// without it the error matches ErrPermission.
func (d *Driver) Migrate(ctx context.Context) error {
	if d == nil {
		return errNilDriver
	}
	return d.doOn(ctx, "migrate", false, d.migrate)
}

// migrate creates the tables when missing, and checks their columns.
func (d *Driver) migrate(ctx context.Context) error {
	d.migrateMu.Lock()
	defer d.migrateMu.Unlock()
	for _, q := range d.createStatements() {
		if _, err := d.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	for _, q := range d.checkStatements() {
		rows, err := d.db.QueryContext(ctx, q)
		if err == nil {
			err = rows.Close()
		}
		if errorNumber(err) == errBadField {
			return errors.Join(driver.ErrConflict, fmt.Errorf("mysqllock: %s is not a dlock table: %w", d.table, err))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
