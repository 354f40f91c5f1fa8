package redisscript

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/redis/go-redis/v9"
)

// unavailablePrefixes are server replies that mean "not now" rather than "no".
var unavailablePrefixes = []string{"READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY ", "NOREPLICAS"}

// MapErr turns a go-redis error from a script or command into one matching the
// dlock sentinels: ErrConflict for WRONGTYPE and the scripts' DLOCKCONFLICT
// replies, ErrUnavailable for network errors and "not now" replies; context
// errors and nil pass through, and any other server reply is prefixed with pkg.
func MapErr(pkg string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
	}
	msg := rerr.Error()
	if strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "DLOCKCONFLICT") {
		return fmt.Errorf("%w: %w", dlock.ErrConflict, err)
	}
	for _, p := range unavailablePrefixes {
		if strings.HasPrefix(msg, p) {
			return fmt.Errorf("%w: %w", dlock.ErrUnavailable, err)
		}
	}
	return fmt.Errorf("%s: %w", pkg, err)
}
