// Package faulttest holds dlock's fault-injection suite: real redis-server
// processes, lock holders in child processes that are killed or paused with
// signals, an in-process TCP proxy that cuts and delays the connection to Redis,
// server restarts without persistence, and a multi-process counter hammer. Every
// scenario checks its invariant at the protected resource (fenced writes, lost
// updates) and on one monotonic clock (the old holder is told before a new one
// acquires). The package has tests only; run it with
//
//	go test -race -count=1 -v ./faulttest/
//
// and read the "SUMMARY" lines for the figures each scenario measured.
package faulttest
