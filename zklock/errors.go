package zklock

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlock-go/dlock/driver"
	"github.com/go-zookeeper/zk"
)

// mapErr turns a ZooKeeper client error into one that matches a dlock sentinel.
// Context errors pass through.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, zk.ErrNoAuth), errors.Is(err, zk.ErrAuthFailed), errors.Is(err, zk.ErrInvalidACL):
		return fmt.Errorf("%w: %w", driver.ErrRefused, err)
	case errors.Is(err, zk.ErrNoChildrenForEphemerals):
		return fmt.Errorf("%w: %w", driver.ErrConflict, err)
	}
	return fmt.Errorf("%w: %w", driver.ErrUnavailable, err)
}

func notHeld(key string) error {
	return fmt.Errorf("%w: %q has no node of this owner", driver.ErrNotHeld, key)
}

func isNoNode(err error) bool { return errors.Is(err, zk.ErrNoNode) }
