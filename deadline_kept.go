//go:build !dlockverify_nodeadline

package dlock

// deadlineIgnored is false: a lease ends at its local deadline (its Done
// fires). The verification suite's nodeadline variant builds its workers with
// the build tag dlockverify_nodeadline, under which it is true
// (deadline_ignored.go); no other build has that file.
const deadlineIgnored = false
