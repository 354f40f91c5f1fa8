package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestVerifyLinksNoTestCode: the dlock binary, verify command included,
// links neither package testing nor the test servers (the verification
// suite's store starters and its runs are the suite's tests' alone).
func TestVerifyLinksNoTestCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed %d packages: %s", len(deps), out)
	}
	found := map[string]bool{}
	for _, d := range deps {
		found[d] = true
	}
	if !found["github.com/dlock-go/dlock/verify"] {
		t.Fatal("the dlock binary does not link the verification suite: this test checks nothing")
	}
	for _, bad := range []string{"testing", "github.com/dlock-go/dlock/internal/testserver"} {
		if found[bad] {
			t.Errorf("the dlock binary links %s", bad)
		}
	}
}
