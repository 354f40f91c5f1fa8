//go:build dlockverify_nodeadline

package dlock

// deadlineIgnored, under the build tag dlockverify_nodeadline alone (the
// verification suite's nodeadline variant), breaks the lease on purpose: it
// does not end at its local deadline, whose value stays right, and its Done
// fires only on a release or a loss the store reports.
const deadlineIgnored = true
