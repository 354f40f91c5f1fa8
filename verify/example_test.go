package verify_test

import (
	"fmt"
	"time"

	"github.com/dlock-go/dlock/verify"
)

// A recorded history, checked: worker 1 was granted the key while worker 0
// still held it, and worker 0 was not told first (its Done never fired): the
// exclusion and told-first checkers report it. The tokens still grew, so
// fencing holds.
func ExampleAnalysis_Check() {
	ms := int64(time.Millisecond)
	h := []verify.Event{
		{T: 1 * ms, Proc: 0, Op: verify.OpAcquire, Type: verify.Invoke, ID: 1, Key: "k"},
		{T: 2 * ms, Proc: 0, Op: verify.OpAcquire, Type: verify.OK, ID: 1, Key: "k", Token: 5, Deadline: 900 * ms},
		{T: 3 * ms, Proc: 1, Op: verify.OpAcquire, Type: verify.Invoke, ID: 1, Key: "k"},
		{T: 4 * ms, Proc: 1, Op: verify.OpAcquire, Type: verify.OK, ID: 1, Key: "k", Token: 6, Deadline: 900 * ms},
		{T: 5 * ms, Proc: 0, Op: verify.OpRelease, Type: verify.Invoke, ID: 2, Key: "k", Token: 5},
		{T: 6 * ms, Proc: 0, Op: verify.OpRelease, Type: verify.OK, ID: 2, Key: "k", Token: 5},
		{T: 7 * ms, Proc: 1, Op: verify.OpRelease, Type: verify.Invoke, ID: 2, Key: "k", Token: 6},
		{T: 8 * ms, Proc: 1, Op: verify.OpRelease, Type: verify.OK, ID: 2, Key: "k", Token: 6},
	}
	for i := range h {
		h[i].Line = i + 1
	}
	a := verify.Analyze(h, verify.Params{Kind: "mutex", TTL: time.Second, Bound: time.Second})
	fmt.Println("fencing holds:", a.Fencing() == nil)
	for _, v := range a.Check() {
		fmt.Println("violated:", v.Checker)
	}
	// Output:
	// fencing holds: true
	// violated: exclusion
	// violated: told-first
}
