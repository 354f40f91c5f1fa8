package main

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/pglock"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgStore is a store in a PostgreSQL database (pglock's lease table, created
// when missing): exclusive locks only.
type pgStore struct{ *consensusStore }

func (s pgStore) locker(kind lockKind, opts ...dlock.Option) (dlock.Locker, error) {
	if kind.fair || kind.slots != 1 || kind.shared || kind.exclusive {
		return nil, usageErrorf("--fair, -n, -s and -x are not available on %s: it has the exclusive lock only", s.where)
	}
	return s.newc(opts...)
}

// openPostgres connects to the PostgreSQL database at raw (a postgres:// URL,
// a key=value connection string, or host:port) and checks that it answers.
func openPostgres(ctx context.Context, raw string, tf *tlsFiles) (store, error) {
	conn := raw
	if !strings.Contains(raw, "://") && !strings.Contains(raw, "=") {
		hp, err := hostPort(raw)
		if err != nil {
			return nil, err
		}
		conn = "postgres://" + hp + "/"
	}
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, usageErrorf("bad PostgreSQL URL: %v", redactPG(err.Error(), raw))
	}
	cfg.ConnConfig.ConnectTimeout = dialTimeout
	if tf.set() {
		// The files add to what the URL's sslmode asks for (sslmode=require or
		// stricter turns TLS on).
		if cfg.ConnConfig.TLSConfig == nil {
			return nil, usageErrorf("--tls-* with a PostgreSQL URL whose sslmode does not use TLS: add ?sslmode=verify-full (or require)")
		}
		if cfg.ConnConfig.TLSConfig, err = tf.apply(cfg.ConnConfig.TLSConfig); err != nil {
			return nil, err
		}
	}
	where := "PostgreSQL at " + net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))) + "/" + cfg.ConnConfig.Database
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, unavailableErrorf("cannot reach %s: %v", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		return nil, unavailableErrorf("cannot reach %s: %v", where, redactPG(err.Error(), raw))
	}
	d, err := pglock.NewDriver(pool, pglock.Config{CreateTable: true})
	if err != nil {
		pool.Close()
		return nil, err
	}
	c, err := d.Client()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pgStore{&consensusStore{
		where:  where,
		newc:   func(opts ...dlock.Option) (dlock.Locker, error) { return d.Client(opts...) },
		insp:   c,
		closer: pool.Close,
		purge: func(ctx context.Context, prefix string) (int, error) {
			// A prefix holds no LIKE wildcard (dlock verify checks it).
			tag, err := pool.Exec(ctx, "DELETE FROM "+pglock.DefaultTable+" WHERE key LIKE $1", prefix+"%")
			return int(tag.RowsAffected()), err
		},
	}}, nil
}

// redactPG removes the secrets of the connection string raw (a URL's, or a
// key=value string's password) from msg.
func redactPG(msg, raw string) string {
	msg = redact(msg, raw)
	if cfg, err := pgxpool.ParseConfig(raw); err == nil && cfg.ConnConfig.Password != "" {
		msg = strings.ReplaceAll(msg, cfg.ConnConfig.Password, "xxxxx")
	}
	return msg
}
