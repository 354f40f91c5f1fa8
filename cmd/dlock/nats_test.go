package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/natslock/natstest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestNATSCommands runs the commands on a NATS server embedded in the test:
// the inspecting ones on a server without the lock bucket create nothing
// (status and unlock say there is no bucket, list is empty); run creates the
// bucket; status and list show a holder, a second run finds the key busy, and
// unlock --force ends the holder's run with the lost lock's exit status at
// once. DLOCK_NATS chooses the backend as --nats does.
func TestNATSCommands(t *testing.T) {
	srv, err := natstest.Start(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	noBucket := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := js.KeyValue(ctx, "dlock")
		return errors.Is(err, jetstream.ErrBucketNotFound)
	}
	key := dlocktest.Key(t)
	for _, args := range [][]string{{"status", key}, {"unlock", "--force", key}} {
		r := dlockRun(t, append(args, "--nats", srv.URL)...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "no dlock bucket in NATS at ") {
			t.Errorf("%s without the bucket: exit %d, want %d saying no dlock bucket; %q", args[0], r.code, exitFailure, r.stderr)
		}
	}
	if r := dlockRun(t, "list", "--json", "--nats", srv.URL); r.code != exitOK || r.stdout != "[]\n" {
		t.Errorf("list without the bucket: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if !noBucket() {
		t.Fatal("an inspecting command created the bucket")
	}
	if r := dlockRun(t, "run", "--nats", srv.URL, key, "--", "true"); r.code != exitOK {
		t.Fatalf("run: exit %d %s", r.code, r.stderr)
	}
	if noBucket() {
		t.Fatal("run did not create the bucket")
	}
	if r := dlockRun(t, "run", "--nats", srv.URL, "orders:42", "--", "true"); r.code == exitOK || !strings.Contains(r.stderr, "NATS bucket cannot hold") {
		t.Errorf("a key NATS cannot hold: exit %d, stderr %q", r.code, r.stderr)
	}

	holder, holderErr, _ := startHolder(t, []string{"--nats", srv.URL, "--ttl", "30s", "--description", "on nats"}, key, `echo ok $$ > "$1"; exec sleep 30`)
	r := dlockRun(t, "status", "--nats", srv.URL, key)
	if r.code != exitOK || !strings.Contains(r.stdout, "on nats") {
		t.Errorf("status of a held key: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = dlockRun(t, "list", "--names", "--nats", srv.URL)
	if strings.TrimSpace(r.stdout) != key {
		t.Errorf("list --names: %q %s", r.stdout, r.stderr)
	}
	envRun := dlockCmd(t, "run", "--wait", "0", key, "--", "true")
	envRun.Env = slices.DeleteFunc(envRun.Env, func(kv string) bool { return strings.HasPrefix(kv, "DLOCK_REDIS=") })
	envRun.Env = append(envRun.Env, "DLOCK_NATS="+srv.URL)
	if r := runCmd(t, envRun); r.code != exitNotObtained {
		t.Errorf("a second run (DLOCK_NATS): exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
	}
	start := time.Now()
	if r := dlockRun(t, "unlock", "--force", "--nats", srv.URL, key); r.code != exitOK {
		t.Fatalf("unlock --force: exit %d %s", r.code, r.stderr)
	}
	hr := wait(t, holder, start, new(bytes.Buffer), holderErr)
	if hr.code != exitLockLost {
		t.Errorf("the holder's run after unlock --force: exit %d, want %d; %s", hr.code, exitLockLost, hr.stderr)
	}
	if hr.elapsed > 5*time.Second {
		t.Errorf("the holder's run ended %v after the force-unlock, want at once (its TTL is 30s)", hr.elapsed)
	}
}

// TestNATSRefusesOtherKinds: the kinds natslock does not keep are refused
// before anything is locked, with the usage error's exit status.
func TestNATSRefusesOtherKinds(t *testing.T) {
	srv, err := natstest.Start(t.TempDir(), natstest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	for _, flags := range [][]string{{"-s"}, {"-x"}} {
		r := dlockRun(t, append(append([]string{"run", "--nats", srv.URL}, flags...), "k", "--", "true")...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "not available on NATS") {
			t.Errorf("run %v: exit %d, stderr %q", flags, r.code, r.stderr)
		}
	}
}

// TestNATSFairLock: run --fair takes natslock's fair lock (creating its
// bucket); status and list show its holder, a second run --fair finds it
// busy, and unlock --force ends the holder's run at once. run -n 2 takes a
// permit of a semaphore of two: two runs hold at once, a third finds it busy.
func TestNATSFairLock(t *testing.T) {
	srv, err := natstest.Start(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	key := dlocktest.Key(t)
	if r := dlockRun(t, "run", "--fair", "--nats", srv.URL, key, "--", "true"); r.code != exitOK {
		t.Fatalf("run --fair: exit %d %s", r.code, r.stderr)
	}
	holder, holderErr, _ := startHolder(t, []string{"--fair", "--nats", srv.URL, "--ttl", "30s", "--description", "fair on nats"}, key, `echo ok $$ > "$1"; exec sleep 30`)
	if r := dlockRun(t, "status", "--nats", srv.URL, key); r.code != exitOK || !strings.Contains(r.stdout, "fair on nats") {
		t.Errorf("status of a held fair lock: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := dlockRun(t, "list", "--names", "--nats", srv.URL); strings.TrimSpace(r.stdout) != key {
		t.Errorf("list --names: %q %s", r.stdout, r.stderr)
	}
	if r := dlockRun(t, "run", "--fair", "--wait", "0", "--nats", srv.URL, key, "--", "true"); r.code != exitNotObtained {
		t.Errorf("a second run --fair: exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
	}
	start := time.Now()
	if r := dlockRun(t, "unlock", "--force", "--nats", srv.URL, key); r.code != exitOK {
		t.Fatalf("unlock --force: exit %d %s", r.code, r.stderr)
	}
	hr := wait(t, holder, start, new(bytes.Buffer), holderErr)
	if hr.code != exitLockLost || hr.elapsed > 5*time.Second {
		t.Errorf("the holder's run after unlock --force: exit %d after %v, want %d at once", hr.code, hr.elapsed, exitLockLost)
	}
	// Semaphores: -n 2 lets two runs hold at once and refuses a third.
	sem := key + "-sem"
	_, _, _ = startHolder(t, []string{"-n", "2", "--nats", srv.URL, "--ttl", "30s"}, sem, `echo ok $$ > "$1"; exec sleep 30`)
	if r := dlockRun(t, "run", "-n", "2", "--wait", "0", "--nats", srv.URL, sem, "--", "true"); r.code != exitOK {
		t.Errorf("a second permit of two: exit %d %s", r.code, r.stderr)
	}
	_, _, _ = startHolder(t, []string{"-n", "2", "--nats", srv.URL, "--ttl", "30s"}, sem, `echo ok $$ > "$1"; exec sleep 30`)
	if r := dlockRun(t, "run", "-n", "2", "--wait", "0", "--nats", srv.URL, sem, "--", "true"); r.code != exitNotObtained {
		t.Errorf("a third permit of two: exit %d, want %d; %s", r.code, exitNotObtained, r.stderr)
	}
	if r := dlockRun(t, "status", "--nats", srv.URL, sem); r.code != exitOK || !strings.Contains(r.stdout, "2 of 2") {
		t.Errorf("status of a semaphore: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestVerifyOnNATS runs dlock verify on an embedded NATS server, its workers
// behind a proxy: every property holds, and the run's keys are removed from
// the bucket's stream; a prefix that NATS keys cannot start with is refused.
func TestVerifyOnNATS(t *testing.T) {
	srv, err := natstest.Start(t.TempDir(), natstest.Options{SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	if r := dlockRun(t, "verify", "--prefix", "vt:", "--duration", "1s", "--ttl", "1s", "--nats", srv.URL); r.code != exitUsage || !strings.Contains(r.stderr, "NATS keys") {
		t.Errorf("prefix vt: exit %d, stderr %q", r.code, r.stderr)
	}
	r := dlockRun(t, "verify", "--prefix", "vt-", "--duration", "4s", "--ttl", "1s", "--nats", srv.URL)
	if r.code != exitOK || !strings.Contains(r.stdout, "every property holds") || !strings.Contains(r.stdout, "faults: stop,kill,reset,delay") {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "KV_dlock")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV.dlock.>"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.stdout, "removed 0 entries") || !strings.Contains(r.stdout, "removed ") {
		t.Errorf("the run removed no entry of its locks:\n%s", r.stdout)
	}
	for subj := range info.State.Subjects {
		if strings.HasPrefix(subj, "$KV.dlock.vt-") {
			t.Errorf("left in the bucket: %s", subj)
		}
	}
}
