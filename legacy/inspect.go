package legacy

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed inspect.lua
	inspectSrc string
	//go:embed force.lua
	forceSrc      string
	inspectScript = redis.NewScript(libSrc + inspectSrc)
	forceScript   = redis.NewScript(forceSrc)
)

var _ driver.Inspector = (*Driver)(nil)

// Inspect implements driver.Inspector: it reads the legacy key and dlock's
// companion. A lock held by an old client of the fleet is Held with an empty
// Owner and no Token; Token and Owner are set when a dlock locker holds it.
// LastToken is the newest token dlock handed out for the key.
func (d *Driver) Inspect(ctx context.Context, key string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	info, _, err := d.inspect(ctx, key)
	return info, err
}

func (d *Driver) inspect(ctx context.Context, key string) (driver.LockInfo, string, error) {
	keys, err := d.keys(key)
	if err != nil {
		return driver.LockInfo{}, "", err
	}
	res, err := inspectScript.Run(ctx, d.rdb, keys, d.args("")...).Slice()
	if err != nil {
		return driver.LockInfo{}, "", mapErr(err)
	}
	if len(res) != 5 {
		return driver.LockInfo{}, "", fmt.Errorf("%w: legacy: unexpected inspect reply %v", driver.ErrRefused, res)
	}
	cur, _ := res[0].(string)
	owner, _ := res[1].(string)
	tok, _ := res[2].(string)
	meta, _ := res[3].(string)
	left, _ := res[4].(int64)
	info := driver.LockInfo{Key: key, TTL: -1}
	info.LastToken, _ = strconv.ParseUint(tok, 10, 64)
	if left < 0 {
		info.TTL = 0
		return info, cur, nil
	}
	info.Held, info.TTL = true, time.Duration(left)*time.Millisecond
	if owner != "" {
		info.Owner, info.Token, info.Metadata = owner, info.LastToken, meta
	}
	return info, cur, nil
}

// ListPrefix implements driver.Inspector over the locks a dlock locker has taken
// in the last FenceRetention (their companion hash names them), held now by
// anyone, whose names start with prefix. Locks only old clients have taken are
// not seen.
func (d *Driver) ListPrefix(ctx context.Context, prefix string) ([]driver.LockInfo, error) {
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, "{*}:dlock*", 1000).Iterator()
		for iter.Next(ctx) {
			name, err := node.HGet(ctx, iter.Val(), "k").Result()
			if err != nil || !strings.HasPrefix(name, prefix) {
				continue // not a companion, or one written before names were kept
			}
			mu.Lock()
			names = append(names, name)
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch rdb := d.rdb.(type) {
	case *redis.ClusterClient:
		err = rdb.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, rdb)
	default:
		return nil, fmt.Errorf("%w: legacy List needs a *redis.Client or *redis.ClusterClient", driver.ErrInvalid)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var out []driver.LockInfo
	for _, n := range names {
		info, _, err := d.inspect(ctx, n)
		if errors.Is(err, driver.ErrConflict) || errors.Is(err, driver.ErrInvalid) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if info.Held {
			out = append(out, info)
		}
	}
	return out, nil
}

// ForceUnlock implements driver.Inspector: it deletes the legacy key whoever
// holds it (a dlock locker or an old client), if it still holds the stamp just
// read. The holder is not told; a dlock holder learns at its next renewal.
func (d *Driver) ForceUnlock(ctx context.Context, key string) (driver.LockInfo, error) {
	if err := driver.ValidateKey(key); err != nil {
		return driver.LockInfo{}, err
	}
	for range 3 {
		info, cur, err := d.inspect(ctx, key)
		if err != nil {
			return info, err
		}
		if !info.Held {
			return info, fmt.Errorf("%w: %q is free", driver.ErrNotHeld, key)
		}
		keys, err := d.keys(key)
		if err != nil {
			return info, err
		}
		n, err := forceScript.Run(ctx, d.rdb, keys, cur).Int64()
		if err != nil {
			return info, mapErr(err)
		}
		if n == 1 {
			return info, nil
		}
	}
	return driver.LockInfo{Key: key}, fmt.Errorf("%w: %q changed hands while being removed", driver.ErrNotHeld, key)
}
