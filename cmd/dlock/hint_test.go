package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestUnknownCommandHints: a flag before the command and a misspelled command
// get a hint to the command meant, not only "unknown command".
func TestUnknownCommandHints(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-v", "run", "k", "--", "true"}, `flags go after the command name: dlock run -v ...`},
		{[]string{"--wait", "5s", "status", "k"}, `flags go after the command name: dlock status --wait 5s ...`},
		{[]string{"-v"}, `flags go after the command name (dlock COMMAND [flags] [args]); dlock --version prints the version`},
		{[]string{"--redis", "redis://h:1/0"}, `flags go after the command name (dlock COMMAND [flags] [args])`},
		{[]string{"--redis=redis://u:s3cret@h:1/0", "--redis", "redis://:s3cret@h:2/0", "run", "k"}, `flags go after the command name: dlock run --redis=redis://u:xxxxx@h:1/0 --redis redis://:xxxxx@h:2/0 ...`},
		{[]string{"staus", "k"}, `did you mean "status"?`},
		{[]string{"lsit"}, `did you mean "list"?`},
		{[]string{"Run"}, `did you mean "run"?`},
		{[]string{"tpo"}, `did you mean "top"?`},
		{[]string{"server"}, `did you mean "serve"?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate"` + "\n"},
		{[]string{"rn"}, `did you mean "run"?`},
		{[]string{"x"}, `unknown command "x"` + "\n"},
	} {
		var stderr bytes.Buffer
		e := &env{stdout: new(bytes.Buffer), stderr: &stderr, getenv: func(string) string { return "" }, width: func() int { return 0 }}
		code := run(context.Background(), e, c.args)
		if code != exitUsage || !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "dlock --help") || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("dlock %s: exit %d, stderr %q; want %d and %q", strings.Join(c.args, " "), code, stderr.String(), exitUsage, c.want)
		}
	}
}
