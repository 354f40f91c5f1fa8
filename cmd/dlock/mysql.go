package main

import (
	"context"
	"crypto/tls"
	"database/sql"
	"errors"
	"net"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/driver"
	"github.com/dlock-go/dlock/mysqllock"
	"github.com/go-sql-driver/mysql"
)

// mysqlStore is a store in a MySQL or MariaDB database (mysqllock's lease
// table, which run creates when missing and inspection never does): the
// exclusive lock, the fair lock and semaphores.
type mysqlStore struct {
	*mutexStore
	db *sql.DB
}

func (s mysqlStore) locker(kind lockKind, permits int, opts ...dlock.Option) (dlock.Locker, error) {
	switch kind {
	case plainLock:
		return s.newc(opts...)
	case semaphoreLock:
		d, err := mysqllock.NewSemaphoreDriver(s.db, permits, mysqllock.WithCreateTable())
		if err != nil {
			return nil, err
		}
		return dlock.NewClient(d, opts...)
	case fairLock:
		d, err := mysqllock.NewFairDriver(s.db, mysqllock.WithCreateTable())
		if err != nil {
			return nil, err
		}
		return dlock.NewClient(d, opts...)
	}
	return nil, usageErrorf("-s and -x are not available on %s: it has no read-write lock", s.where)
}

// resizer returns the semaphores' Resizer of s.
func (s mysqlStore) resizer() (driver.Resizer, error) {
	return mysqllock.NewSemaphoreDriver(s.db, mysqllock.StoredSize, mysqllock.WithCreateTable())
}

// openMySQL connects to the MySQL or MariaDB database at raw (a DSN of
// github.com/go-sql-driver/mysql, user:pass@tcp(host:port)/db, a
// mysql://user:pass@host:port/db URL, or host:port) and checks that it
// answers.
func openMySQL(ctx context.Context, raw string, tf *tlsFiles) (store, error) {
	dsn := raw
	switch {
	case strings.HasPrefix(raw, "mysql://"):
		rest := strings.TrimPrefix(raw, "mysql://")
		at := strings.LastIndex(rest, "@")
		hostEnd := strings.IndexAny(rest[at+1:], "/?")
		if hostEnd < 0 {
			hostEnd = len(rest) - at - 1
		}
		host := rest[at+1 : at+1+hostEnd]
		dsn = rest[:at+1] + "tcp(" + host + ")" + rest[at+1+hostEnd:]
		if !strings.Contains(dsn[at+1:], "/") {
			dsn += "/"
		}
	case !strings.Contains(raw, "@") && !strings.Contains(raw, "/") && !strings.Contains(raw, "("):
		hp, err := hostPort(raw)
		if err != nil {
			return nil, err
		}
		dsn = "tcp(" + hp + ")/"
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, usageErrorf("bad MySQL DSN %s: %s", maskURL(raw), redact(err.Error(), raw))
	}
	cfg.Timeout = dialTimeout
	if tf.set() {
		host, _, _ := net.SplitHostPort(cfg.Addr)
		if cfg.TLS, err = tf.apply(&tls.Config{ServerName: host}); err != nil {
			return nil, err
		}
	}
	where := "MySQL at " + cfg.Addr + "/" + cfg.DBName
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, usageErrorf("bad MySQL DSN %s: %s", maskURL(raw), redact(err.Error(), raw))
	}
	db := sql.OpenDB(connector)
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = db.Close()
		return nil, mysqlConnectError(where, raw, err)
	}
	d, err := mysqllock.NewDriver(db, mysqllock.WithCreateTable())
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	c, err := mysqllock.NewClient(d)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return mysqlStore{db: db, mutexStore: &mutexStore{
		where:  where,
		newc:   func(opts ...dlock.Option) (dlock.Locker, error) { return mysqllock.NewClient(d, opts...) },
		insp:   tableInspector{c, where, mysqllock.ErrNoTable},
		plain:  driver.KindMutex,
		sync:   d,
		closer: func() { _ = db.Close() },
		purge: func(ctx context.Context, keys []string) (int, error) {
			if len(keys) == 0 {
				return 0, nil
			}
			args := make([]any, len(keys))
			for i, k := range keys {
				args[i] = k
			}
			res, err := db.ExecContext(ctx, "DELETE FROM "+mysqllock.DefaultTable+" WHERE lock_key IN (?"+strings.Repeat(", ?", len(keys)-1)+")", args...)
			var me *mysql.MySQLError
			if errors.As(err, &me) && me.Number == 1146 {
				return 0, nil
			}
			if err != nil {
				return 0, err
			}
			n, err := res.RowsAffected()
			return int(n), err
		},
	}}, nil
}

// mysqlConnectError explains why the MySQL server at where (DSN raw) did not
// let dlock in, without its password: the server's reason when it answered,
// else the network's.
func mysqlConnectError(where, raw string, err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return unavailableErrorf("%s refused: %s", where, redact(me.Error(), raw))
	}
	return unavailableErrorf("cannot reach %s: %s", where, redact(oneLine(err), raw))
}
