package legacy

import (
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock/internal/redisscript"
)

// LockKey returns the Redis key the fleet locks for key, or an error matching
// dlock.ErrInvalid when Format.Key maps it to a name dlock cannot use.
func (d *Driver) LockKey(key string) (string, error) {
	k := d.f.Key(key)
	if k == "" || len(k) > 2*driver.MaxKeyLen {
		return "", fmt.Errorf("%w: legacy key name of %d bytes for %q", driver.ErrInvalid, len(k), key)
	}
	return k, nil
}

// CompanionKey returns the hash where dlock keeps the owner, the stamp it wrote,
// the fencing counter and the metadata of the legacy lock key lockKey. It lies in the
// same Redis Cluster slot: "{lockKey}:dlock", or "{tag}:dlock:lockKey" when
// lockKey has a hash tag of its own. A lock key with a '}' outside a hash tag
// cannot share a slot this way and is dlock.ErrInvalid.
func CompanionKey(lockKey string) (string, error) {
	if tag, ok := redisscript.HashTag(lockKey); ok {
		return "{" + tag + "}:dlock:" + lockKey, nil
	}
	if strings.ContainsRune(lockKey, '}') {
		return "", fmt.Errorf("%w: legacy key %q has a '}' outside a hash tag", driver.ErrInvalid, lockKey)
	}
	return "{" + lockKey + "}:dlock", nil
}

func (d *Driver) keys(key string) ([]string, error) {
	k, err := d.LockKey(key)
	if err != nil {
		return nil, err
	}
	c, err := CompanionKey(k)
	if err != nil {
		return nil, err
	}
	return []string{k, c}, nil
}
