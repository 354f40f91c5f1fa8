//go:build !linux

package main

import (
	"context"
	"errors"
)

// runVerify refuses: the workload's clock and its workers' signals are Linux's.
func runVerify(ctx context.Context, e *env, args []string) int {
	return fail(e, "verify", errors.New("dlock verify runs on Linux only"))
}
