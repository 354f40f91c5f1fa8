package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/dlock-go/dlock"
)

// runMetrics is what dlock run saw of its lock, written as one JSON line at
// exit with --metrics-file, for a cron wrapper to ship.
type runMetrics struct {
	dlock.NopObserver
	path string // --metrics-file; "" for none

	mu              sync.Mutex
	Key             string  `json:"key"`
	Backend         string  `json:"backend,omitempty"`
	Outcome         string  `json:"outcome"` // of the acquisition: acquired, busy, timeout, canceled, unavailable, refused, invalid
	End             string  `json:"end,omitempty"`
	LossCause       string  `json:"loss_cause,omitempty"`
	Token           uint64  `json:"token,omitempty"`
	Attempts        int     `json:"attempts"`
	WaitSeconds     float64 `json:"wait_seconds"`
	HoldSeconds     float64 `json:"hold_seconds"`
	Renewals        int     `json:"renewals"`
	RenewalFailures int     `json:"renewal_failures"`
	ExitCode        int     `json:"exit_code"`
}

// define adds --metrics-file to fs.
func (m *runMetrics) define(fs *flag.FlagSet) {
	fs.StringVar(&m.path, "metrics-file", "", "at exit, append one JSON line to `PATH`: outcome, wait and hold time (seconds), attempts, renewals, how the lease ended, exit code")
}

// options returns the lock options that feed m, none without --metrics-file.
func (m *runMetrics) options() []dlock.Option {
	if m.path == "" {
		return nil
	}
	return []dlock.Option{dlock.WithObserver(m)}
}

// AcquireEnd records an acquisition; the wait adds up over the first
// attempt and the wait that follows it.
func (m *runMetrics) AcquireEnd(ctx context.Context, e dlock.AcquireEndEvent) context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Key, m.Backend, m.Outcome = e.Key, e.Backend, acquireOutcome(e.Err)
	m.Attempts += e.Attempts
	m.WaitSeconds += roundSeconds(e.Wait)
	if e.Lease != nil {
		m.Token = e.Lease.Token()
	}
	return ctx
}

// Renewal counts a renewal.
func (m *runMetrics) Renewal(_ context.Context, e dlock.RenewalEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Renewals++
	if e.Err != nil {
		m.RenewalFailures++
	}
}

// Loss records the loss.
func (m *runMetrics) Loss(_ context.Context, e dlock.LossEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.End, m.LossCause, m.HoldSeconds = "lost", string(e.Cause), roundSeconds(e.Held)
}

// Release records the release.
func (m *runMetrics) Release(_ context.Context, e dlock.ReleaseEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.End, m.HoldSeconds = "released", roundSeconds(e.Held)
	switch {
	case errors.Is(e.Err, dlock.ErrNotHeld):
		m.End = "not_held"
	case e.Err != nil:
		m.End = "error"
	}
}

// write appends m's line, with the exit code, to --metrics-file; a failure is
// said on stderr and does not change the exit code.
func (m *runMetrics) write(e *env, key string, code int) {
	if m.path == "" {
		return
	}
	m.mu.Lock()
	m.ExitCode = code
	if m.Key == "" {
		m.Key = key
	}
	if m.Outcome == "" {
		m.Outcome = "not_attempted"
	}
	line, err := json.Marshal(m)
	m.mu.Unlock()
	if err == nil {
		var f *os.File
		f, err = os.OpenFile(m.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
		if err == nil {
			_, err = f.Write(append(line, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		fmt.Fprintf(e.stderr, "dlock run: --metrics-file: %v\n", err)
	}
}

// roundSeconds keeps the JSON short: durations to the microsecond.
func roundSeconds(d time.Duration) float64 { return d.Round(time.Microsecond).Seconds() }

// acquireOutcome names how an acquisition that ended with err ended, as the
// metrics line's outcome.
func acquireOutcome(err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, dlock.ErrInvalid), errors.Is(err, dlock.ErrConflict):
		return "invalid"
	case errors.Is(err, dlock.ErrRefused):
		return "refused"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, dlock.ErrNotObtained):
		return "busy"
	}
	return "unavailable"
}
