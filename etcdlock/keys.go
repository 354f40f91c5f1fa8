package etcdlock

import (
	"fmt"
	"strings"

	"github.com/dlock-go/dlock/driver"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Prefix starts every key dlock writes to etcd.
const Prefix = "dlock/"

// QueuePrefix returns the etcd key prefix of the entries of the lock named key.
func QueuePrefix(key string) string { return Prefix + "{" + key + "}/" }

// EntryKey returns the etcd key of owner's entry for the lock named key.
func EntryKey(key, owner string) string { return QueuePrefix(key) + owner }

// AbandonKey returns the etcd key that marks owner's acquisition of the lock
// named key as abandoned (see Driver.Abandon). It lies outside every queue.
func AbandonKey(key, owner string) string { return Prefix + "abandoned/{" + key + "}/" + owner }

// DelayKey returns the etcd key of the lock-delay marker of the lock named
// key (see Driver.MaxLockDelay). It lies outside every queue.
func DelayKey(key string) string { return Prefix + "delay/{" + key + "}" }

// checkOwner rejects owner tokens that cannot be the last element of an entry key.
func checkOwner(owner string) error {
	if owner == "" || strings.ContainsAny(owner, "/{}") || driver.ValidateKey(owner) != nil {
		return fmt.Errorf("%w: owner %q", driver.ErrInvalid, owner)
	}
	return nil
}

// foreign reports whether kv, found among a lock's entries, was not written by
// this package: every entry has a lease.
func foreign(kv *mvccpb.KeyValue) bool { return kv.Lease == 0 }
