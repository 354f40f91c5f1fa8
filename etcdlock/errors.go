package etcdlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mapErr turns an etcd client error into one matching the dlock sentinels:
// context errors as they are; refusals that waiting will not cure (permissions,
// authentication, a full database, a request etcd will never accept) as
// dlock.ErrRefused; everything else (no leader, unreachable endpoints, overload)
// as dlock.ErrUnavailable. The cause stays wrapped.
func mapErr(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	switch errCode(err) {
	case codes.PermissionDenied, codes.Unauthenticated, codes.InvalidArgument, codes.FailedPrecondition:
		return errors.Join(driver.ErrRefused, err)
	case codes.ResourceExhausted:
		if errors.Is(err, rpctypes.ErrNoSpace) {
			return errors.Join(driver.ErrRefused, err)
		}
	}
	return errors.Join(driver.ErrUnavailable, err)
}

func errCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}

// leaseGone reports whether err says that a lease does not exist (any more).
func leaseGone(err error) bool { return errors.Is(err, rpctypes.ErrLeaseNotFound) }

func conflict(key string, kv *mvccpb.KeyValue) error {
	return fmt.Errorf("%w: etcd key %q of lock %q has no lease", driver.ErrConflict, kv.Key, key)
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q is not held by this owner", driver.ErrNotHeld, key)
}
