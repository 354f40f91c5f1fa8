//go:build race

package redislock_test

// raceOn is true when the race detector is on: it changes what allocates
// (sync.Pool drops some of what it is given).
const raceOn = true
