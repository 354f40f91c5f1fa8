package main

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"
)

// zkRecipeVariant is go-zookeeper's own lock recipe (zk.NewLock), on a
// ZooKeeper connection of its own per locker: the baseline of the zk variant.
var zkRecipeVariant = variant{name: "zk/recipe", lib: "zk-recipe", peer: true, in: inA | inBC, on: onZK,
	desc: "go-zookeeper v1.0.4 zk.NewLock on a zk.Conn (one session, 15s timeout) of its own: protected ephemeral sequential node, watch on the predecessor; no TTL, token or metadata",
	open: openZKRecipe}

// zkRecipeRoot is the parent node of the recipe's locks.
const zkRecipeRoot = "/bench-recipe"

// openZKRecipe opens a ZooKeeper session whose packets (pings included) count
// as lock commands.
func openZKRecipe(o opening) (locker, error) {
	if o.e == nil || o.e.cons.zk == nil {
		return nil, errors.New("bench: no ZooKeeper server in this run")
	}
	conn, events, err := zk.Connect([]string{o.e.cons.zk.Addr}, peerSession,
		zk.WithDialer(countingDialer(o.cnt)), zk.WithLogger(zkQuiet{}))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			conn.Close()
			return nil, errors.New("bench: no ZooKeeper session")
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // the channel must be drained, or the client blocks
					for range events {
					}
				}()
				return zkRecipe{conn}, nil
			}
		}
	}
}

// peerSession is the session timeout of the recipe's connections, zklock's
// default.
const peerSession = 15 * time.Second

// zkQuiet drops the ZooKeeper client's log lines.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

type zkRecipe struct{ c *zk.Conn }

func (r zkRecipe) Close() error { r.c.Close(); return nil }

func (zkRecipe) notified() bool { return true }

func (r zkRecipe) mutex(key string) mutex {
	return &zkRecipeMutex{c: r.c, path: zkRecipeRoot + "/" + key}
}

type zkRecipeMutex struct {
	c    *zk.Conn
	path string
	l    *zk.Lock
}

// lock runs the recipe's Lock, which takes no context: when ctx ends first the
// lock is released as soon as the recipe obtains it.
func (m *zkRecipeMutex) lock(ctx context.Context) error {
	l := zk.NewLock(m.c, m.path, zk.WorldACL(zk.PermAll))
	done := make(chan error, 1)
	go func() { done <- l.Lock() }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
		m.l = l
		return nil
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = l.Unlock()
			}
		}()
		return errors.Join(errNotObtained, ctx.Err())
	}
}

func (m *zkRecipeMutex) unlock(context.Context) error {
	l := m.l
	m.l = nil
	return l.Unlock()
}
