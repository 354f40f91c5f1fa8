package main

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cells splits a line of a list table into its cells at the columns of head,
// its title line.
func cells(head, line string) map[string]string {
	titles := strings.Fields(head)
	out := map[string]string{}
	for i, title := range titles {
		start := strings.Index(head, title)
		end := len(line)
		if i+1 < len(titles) {
			end = min(strings.Index(head, titles[i+1]), len(line))
		}
		if start < len(line) {
			out[title] = strings.TrimSpace(line[start:end])
		}
	}
	return out
}

// TestListAndWatchSameColumns: dlock list and dlock list --watch print the
// same columns, with the same cells for a lock; both, and serve, count the
// dlock run waiting for a plain lock.
func TestListAndWatchSameColumns(t *testing.T) {
	key := shortPrefix() + ":job"
	holdWith(t, key, "--description", "nightly report")
	if err := dlockCmd(t, "run", "--wait", "60s", key, "--", "true").Start(); err != nil {
		t.Fatal(err)
	}
	var list []string
	waitFor(t, "list to count the waiter", func() bool {
		r := dlockRun(t, "list", key)
		list = strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
		return len(list) == 2 && cells(list[0], list[1])["WAITERS"] == "1"
	})
	cmd := dlockCmd(t, "list", "--watch", "--interval", "200ms", key)
	var out string
	cmd.Stdout = outFile(t, &out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two blocks of list --watch", func() bool { return strings.Count(readFile(out), "\n\n") >= 2 })
	_ = cmd.Process.Signal(syscall.SIGINT)
	wait(t, cmd, time.Now(), new(bytes.Buffer), new(bytes.Buffer))
	block := strings.Split(strings.Split(readFile(out), "\n\n")[1], "\n")
	if len(block) != 3 || !strings.Contains(block[0], "1 held, 1 waiting") {
		t.Fatalf("list --watch block %q", block)
	}
	if strings.Join(strings.Fields(block[1]), " ") != strings.Join(strings.Fields(list[0]), " ") {
		t.Errorf("different columns:\nlist:         %s\nlist --watch: %s", list[0], block[1])
	}
	lc, wc := cells(list[0], list[1]), cells(block[1], block[2])
	for _, c := range []string{"KEY", "KIND", "HOLDERS", "HOST", "PID", "TOKEN", "WAITERS", "DESCRIPTION"} {
		if lc[c] != wc[c] || lc[c] == "" {
			t.Errorf("column %s: list %q, list --watch %q", c, lc[c], wc[c])
		}
	}
	if lc["WAITERS"] != "1" || lc["DESCRIPTION"] != "nightly report" {
		t.Errorf("list row %v: want 1 waiter and the description", lc)
	}
	url, _ := startServe(t, key)
	var j serveLocks
	waitFor(t, "serve to count the waiter", func() bool { j = getServe(t, url); return len(j.Locks) == 1 && j.Locks[0].Waiters == 1 })
	if j.Waiters != 1 {
		t.Errorf("serve: %d waiting, want 1", j.Waiters)
	}
}
