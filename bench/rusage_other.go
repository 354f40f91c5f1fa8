//go:build !unix

package main

import "time"

// processCPU reports that this platform's process CPU time is not measured.
func processCPU() (time.Duration, bool) { return 0, false }
