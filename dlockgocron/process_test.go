package dlockgocron_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockgocron"
	"github.com/dlock-go/dlock/redislock"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
)

// The test binary re-executed as one instance of a service: it runs a gocron
// scheduler over redislock, prints "run <unix ns>" for every run of its job and
// "leader <unix ns>" whenever its Elector wins, and exits when its stdin closes.
const childEnv = "DLOCKGOCRON_CHILD" // "locker" or "elector"

type childConfig struct {
	mode     string
	addr     string
	key      string
	base     time.Time
	offset   time.Duration
	interval time.Duration
	minHold  time.Duration
	ttl      time.Duration
}

func (c childConfig) env() []string {
	return append(os.Environ(),
		childEnv+"="+c.mode,
		"DLOCKGOCRON_ADDR="+c.addr,
		"DLOCKGOCRON_KEY="+c.key,
		"DLOCKGOCRON_BASE="+strconv.FormatInt(c.base.UnixNano(), 10),
		"DLOCKGOCRON_OFFSET="+c.offset.String(),
		"DLOCKGOCRON_INTERVAL="+c.interval.String(),
		"DLOCKGOCRON_MINHOLD="+c.minHold.String(),
		"DLOCKGOCRON_TTL="+c.ttl.String(),
	)
}

func readChildConfig() (childConfig, error) {
	c := childConfig{mode: os.Getenv(childEnv), addr: os.Getenv("DLOCKGOCRON_ADDR"), key: os.Getenv("DLOCKGOCRON_KEY")}
	ns, err := strconv.ParseInt(os.Getenv("DLOCKGOCRON_BASE"), 10, 64)
	if err != nil {
		return c, err
	}
	c.base = time.Unix(0, ns)
	for _, d := range []struct {
		env string
		to  *time.Duration
	}{{"DLOCKGOCRON_OFFSET", &c.offset}, {"DLOCKGOCRON_INTERVAL", &c.interval}, {"DLOCKGOCRON_MINHOLD", &c.minHold}, {"DLOCKGOCRON_TTL", &c.ttl}} {
		if *d.to, err = time.ParseDuration(os.Getenv(d.env)); err != nil {
			return c, err
		}
	}
	return c, nil
}

func childMain() int {
	if err := runChild(); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func runChild() error {
	cfg, err := readChildConfig()
	if err != nil {
		return err
	}
	var outMu sync.Mutex
	say := func(what string) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf("%s %d\n", what, time.Now().UnixNano())
	}
	rdb := redis.NewClient(&redis.Options{Addr: cfg.addr, ContextTimeoutEnabled: true})
	defer rdb.Close()
	client, err := redislock.New(rdb)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var opt gocron.SchedulerOption
	var stop func() error
	switch cfg.mode {
	case "locker":
		l, err := dlockgocron.NewLocker(client, dlockgocron.WithMinHold(cfg.minHold), dlockgocron.WithKeyPrefix(cfg.key))
		if err != nil {
			return err
		}
		opt, stop = gocron.WithDistributedLocker(l), func() error { return l.Close(context.Background()) }
	case "elector":
		e, err := dlockgocron.NewElector(client, cfg.key, dlock.WithTTL(cfg.ttl), dlock.WithAutoRenew(true))
		if err != nil {
			return err
		}
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				ld, err := e.Wait(ctx)
				if err != nil {
					return
				}
				say("leader")
				select {
				case <-ld.Done():
				case <-ctx.Done():
					return
				}
			}
		}()
		opt, stop = gocron.WithDistributedElector(e), func() error {
			cancel()
			<-watched
			return e.Close(context.Background())
		}
	default:
		return fmt.Errorf("unknown mode %q", cfg.mode)
	}
	s, err := gocron.NewScheduler(opt)
	if err != nil {
		return err
	}
	if _, err := s.NewJob(gocron.DurationJob(cfg.interval),
		gocron.NewTask(func() { say("run") }),
		gocron.WithName("report"),
		gocron.WithStartAt(gocron.WithStartDateTime(cfg.base.Add(cfg.offset)))); err != nil {
		return err
	}
	s.Start()
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes stdin
	return errors.Join(s.Shutdown(), stop())
}

type childEvent struct {
	child int
	kind  string
	at    time.Time
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{} // closed when its output has been read to the end
}

// startChildren starts one child per offset, and sends their events on the
// returned channel. The children stop (closed stdin, then killed) when the test
// ends.
func startChildren(t *testing.T, cfg childConfig, offsets []time.Duration) ([]*child, <-chan childEvent) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan childEvent, 1024)
	var kids []*child
	t.Cleanup(func() { // after the children's own clean-ups
		for _, k := range kids {
			<-k.done
		}
		close(events)
	})
	for i, off := range offsets {
		c := cfg
		c.offset = off
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = c.env()
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		k := &child{cmd: cmd, stdin: stdin, done: make(chan struct{})}
		kids = append(kids, k)
		go func() {
			defer close(k.done)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				kind, ns, ok := strings.Cut(sc.Text(), " ")
				n, err := strconv.ParseInt(ns, 10, 64)
				if !ok || err != nil {
					continue
				}
				select {
				case events <- childEvent{child: i, kind: kind, at: time.Unix(0, n)}:
				default: // the test no longer reads
				}
			}
		}()
		t.Cleanup(func() {
			_ = stdin.Close()
			exited := make(chan struct{})
			go func() { <-k.done; _ = cmd.Wait(); close(exited) }()
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	return kids, events
}

// Three scheduler processes whose clocks differ by up to 80ms, each with its own
// connection to redis-server: exactly one run per tick.
func TestLockerProcessesOneRunPerTick(t *testing.T) {
	base := time.Now().Add(1500 * time.Millisecond) // process start-up
	g := newTickLog(base, tickInterval, checkedTicks)
	cfg := childConfig{mode: "locker", addr: srv.Addr, key: t.Name() + ":", base: base, interval: tickInterval, minHold: minHold}
	_, events := startChildren(t, cfg, []time.Duration{0, splayStep, 2 * splayStep})
	go func() {
		for ev := range events {
			if ev.kind == "run" {
				g.record(ev.child, ev.at)
			}
		}
	}()
	g.wait(t)
	g.checkOnePerTick(t)
}

// Three scheduler processes with an Elector each (TTL 1s): the leader runs every
// tick; killed with SIGKILL, it is replaced within its TTL (plus the time the
// waiters take to notice the expiry), and the new leader runs the ticks.
func TestElectorProcessesKilledLeaderReplaced(t *testing.T) {
	const ttl = time.Second
	const interval = 200 * time.Millisecond
	base := time.Now().Add(1500 * time.Millisecond)
	cfg := childConfig{mode: "elector", addr: srv.Addr, key: t.Name(), base: base, interval: interval, ttl: ttl}
	kids, events := startChildren(t, cfg, []time.Duration{0, splayStep, 2 * splayStep})

	next := func(what string, cond func(childEvent) bool) childEvent {
		t.Helper()
		timeout := time.After(20 * time.Second)
		for {
			select {
			case ev := <-events:
				if cond(ev) {
					return ev
				}
			case <-timeout:
				t.Fatalf("no %s within 20s", what)
			}
		}
	}
	first := next("leader", func(ev childEvent) bool { return ev.kind == "leader" })
	runs := map[int]int{} // tick -> runs, while the first leader leads
	for range 3 {
		ev := next("run of the first leader", func(ev childEvent) bool { return ev.kind == "run" })
		if ev.child != first.child {
			t.Fatalf("child %d ran the job while child %d leads", ev.child, first.child)
		}
		runs[int(ev.at.Sub(base)/interval)]++
	}
	if err := kids[first.child].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	second := next("new leader", func(ev childEvent) bool { return ev.kind == "leader" && ev.child != first.child })
	took := second.at.Sub(killed)
	t.Logf("leader %d killed; leader %d elected %v later (TTL %v)", first.child, second.child, took.Round(time.Millisecond), ttl)
	if took > ttl+500*time.Millisecond {
		t.Errorf("new leader after %v, want within the TTL %v (+500ms)", took, ttl)
	}
	for range 3 {
		ev := next("run of the new leader", func(ev childEvent) bool { return ev.kind == "run" && ev.child != first.child })
		if ev.child != second.child {
			t.Fatalf("child %d ran the job while child %d leads", ev.child, second.child)
		}
		runs[int(ev.at.Sub(base)/interval)]++
	}
	for tick, n := range runs {
		if n != 1 {
			t.Errorf("tick %d ran %d times", tick, n)
		}
	}
}
