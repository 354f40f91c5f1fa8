//go:build !race

package dashboard_test

// raceOn is whether the race detector is on (it slows a refresh several times).
const raceOn = false
