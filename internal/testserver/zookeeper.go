package testserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ZooKeeper tick and session bounds of the servers started here. A short tick
// lets tests use short sessions: the server accepts session timeouts from
// ZooKeeperMinSession (2 ticks) to ZooKeeperMaxSession.
const (
	ZooKeeperTick       = 200 * time.Millisecond
	ZooKeeperMinSession = 2 * ZooKeeperTick
	ZooKeeperMaxSession = 30 * time.Second
)

// ZooKeeper is a standalone ZooKeeper server process started for a test.
type ZooKeeper struct {
	Addr string // host:port on 127.0.0.1
	Port int

	dir  string
	proc process
	// id and peers make the server a member of an ensemble (see
	// StartZooKeeperEnsemble): its number, and the server.N lines of every
	// member.
	id    int
	peers string
}

// zooKeeperHome is where the Debian zookeeper package installs its scripts;
// $DLOCK_ZOOKEEPER_HOME overrides (for example an unpacked release tarball).
func zooKeeperHome() string {
	if h := os.Getenv("DLOCK_ZOOKEEPER_HOME"); h != "" {
		return h
	}
	return "/usr/share/zookeeper"
}

// ZooKeeperCommand returns the java command line prefix (java, class path) that
// runs a ZooKeeper server, with the class path computed by the installation's
// bin/zkEnv.sh. The error names the package to install when it is missing.
func ZooKeeperCommand() ([]string, error) {
	env := filepath.Join(zooKeeperHome(), "bin", "zkEnv.sh")
	if _, err := os.Stat(env); err != nil {
		return nil, fmt.Errorf("testserver: ZooKeeper not found (%v): install it: apt-get install -y zookeeper default-jre-headless, or run ./test.sh as root, or set DLOCK_ZOOKEEPER_HOME", err)
	}
	out, err := exec.Command("bash", "-c", `. "$1" >/dev/null 2>&1; printf '%s\n%s' "${JAVA:-java}" "$CLASSPATH"`, "zkEnv", env).Output()
	if err != nil {
		return nil, fmt.Errorf("testserver: run %s: %w", env, err)
	}
	java, cp, _ := strings.Cut(string(out), "\n")
	if _, err := exec.LookPath(java); err != nil {
		return nil, fmt.Errorf("testserver: java (%s) not found for ZooKeeper: install it: apt-get install -y default-jre-headless: %w", java, err)
	}
	if cp == "" {
		return nil, fmt.Errorf("testserver: %s computes no CLASSPATH", env)
	}
	// A logging binding, when the system has one, so that the server's log says
	// why it failed.
	for _, jar := range []string{"/usr/share/java/slf4j-simple.jar"} {
		if _, err := os.Stat(jar); err == nil {
			cp += ":" + jar
		}
	}
	return []string{java, "-Xms32m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dzookeeper.jmx.log4j.disable=true",
		"-cp", cp}, nil
}

// StartZooKeeper starts a standalone ZooKeeper on a free loopback port (see
// NewZooKeeper) and registers its shutdown with t.Cleanup. It fails the test,
// naming the package, when ZooKeeper or java is missing.
func StartZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	z, err := NewZooKeeper(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Stop)
	return z
}

// NewZooKeeper starts a standalone ZooKeeper whose data lives in dir: tick
// ZooKeeperTick, sessions from ZooKeeperMinSession to ZooKeeperMaxSession, no
// admin server, the four-letter words ruok, srvr, conf, cons, wchc, wchp and dump
// allowed. The caller must call Stop.
func NewZooKeeper(dir string) (*ZooKeeper, error) {
	if _, err := ZooKeeperCommand(); err != nil {
		return nil, err
	}
	var z *ZooKeeper
	err := onFreePort(func(port int) error {
		z = &ZooKeeper{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir}
		return z.Start()
	})
	if err != nil {
		return nil, err
	}
	return z, nil
}

// Start (re)starts the server on its port with its data directory, and waits
// until it serves requests (a member of an ensemble: until it has joined a
// quorum, as leader or follower).
func (z *ZooKeeper) Start() error {
	exited, err := z.launch()
	if err != nil {
		return err
	}
	return z.awaitServing(exited)
}

// launch writes the server's configuration and starts it, without waiting.
func (z *ZooKeeper) launch() (<-chan struct{}, error) {
	cmd, err := ZooKeeperCommand()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(z.dir, "zoo.cfg")
	data := filepath.Join(z.dir, "data")
	body := fmt.Sprintf(`tickTime=%d
minSessionTimeout=%d
maxSessionTimeout=%d
dataDir=%s
clientPort=%d
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,conf,cons,wchc,wchp,dump
maxClientCnxns=0
`, ZooKeeperTick.Milliseconds(), ZooKeeperMinSession.Milliseconds(), ZooKeeperMaxSession.Milliseconds(),
		data, z.Port)
	main := "org.apache.zookeeper.server.ZooKeeperServerMain"
	if z.peers != "" {
		// A follower that hears nothing from its leader for syncLimit
		// ticks leaves it; a new leader waits initLimit ticks for its
		// followers to sync.
		body += "initLimit=10\nsyncLimit=5\nstandaloneEnabled=false\n" + z.peers
		main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
		if err := os.MkdirAll(data, 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(z.id)+"\n"), 0o644); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return nil, err
	}
	args := append(cmd[1:], main, cfg)
	return z.proc.start(exec.Command(cmd[0], args...), filepath.Join(z.dir, "zookeeper.log"))
}

// awaitServing waits until the server started with exit channel exited serves
// requests: "ruok" answers before it does; srvr names its mode only once it
// does.
func (z *ZooKeeper) awaitServing(exited <-chan struct{}) error {
	return z.proc.awaitReady(exited, "ZooKeeper on "+z.Addr, func() bool {
		_, err := z.Mode()
		return err == nil
	})
}

// Mode returns the server's mode as srvr names it: standalone, leader or
// follower; an error while it serves no requests.
func (z *ZooKeeper) Mode() (string, error) {
	out, err := z.FourLetter("srvr")
	if err != nil {
		return "", err
	}
	_, mode, ok := strings.Cut(out, "Mode: ")
	if !ok {
		return "", fmt.Errorf("testserver: ZooKeeper on %s serves no requests: %s", z.Addr, strings.TrimSpace(out))
	}
	mode, _, _ = strings.Cut(mode, "\n")
	return strings.TrimSpace(mode), nil
}

// FourLetter sends a four-letter-word command (such as "srvr" or "wchp") and
// returns the server's answer.
func (z *ZooKeeper) FourLetter(word string) (string, error) {
	if len(word) != 4 {
		return "", errors.New("testserver: four-letter word of the wrong length")
	}
	c, err := net.DialTimeout("tcp", z.Addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte(word)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// Stop kills the server (SIGKILL) and waits for it to exit. Its data directory
// stays: Start brings the same data back. It is safe to call more than once.
func (z *ZooKeeper) Stop() { z.proc.stop() }

// Signal sends sig to the server process (for example SIGSTOP and SIGCONT).
func (z *ZooKeeper) Signal(sig os.Signal) error { return z.proc.signal(sig) }

// PID returns the server's process ID, or 0 when it is not running.
func (z *ZooKeeper) PID() int { return z.proc.pid() }

// ZooKeeperEnsemble is an ensemble of ZooKeeper servers started for a test.
type ZooKeeperEnsemble struct {
	Members []*ZooKeeper
}

// Addrs returns the members' client addresses.
func (e *ZooKeeperEnsemble) Addrs() []string {
	a := make([]string, len(e.Members))
	for i, m := range e.Members {
		a[i] = m.Addr
	}
	return a
}

// Leader returns the running member that serves as the ensemble's leader,
// waiting (bounded by ctx) while there is none (an election).
func (e *ZooKeeperEnsemble) Leader(ctx context.Context) (*ZooKeeper, error) {
	for {
		for _, m := range e.Members {
			if m.PID() == 0 {
				continue
			}
			if mode, err := m.Mode(); err == nil && mode == "leader" {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: no ZooKeeper leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartZooKeeperEnsemble starts an ensemble of n (at least 3, odd) ZooKeeper
// servers on free loopback ports, each with the bounds of NewZooKeeper and its
// data in a directory of t.TempDir, and waits until every member serves
// requests. All of them are stopped by t.Cleanup, also when the start fails
// half way. A member stopped (Stop) and started again (Start) rejoins.
func StartZooKeeperEnsemble(t testing.TB, n int) *ZooKeeperEnsemble {
	t.Helper()
	if n < 3 || n%2 == 0 {
		t.Fatalf("testserver: ZooKeeper ensemble of %d servers (3, 5, ...)", n)
	}
	if _, err := ZooKeeperCommand(); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for try := 0; try < 3; try++ {
		e, err := startZooKeeperEnsemble(t.TempDir(), n)
		if err == nil {
			t.Cleanup(e.stop)
			return e
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

// stop stops every member.
func (e *ZooKeeperEnsemble) stop() {
	for _, m := range e.Members {
		m.Stop()
	}
}

func startZooKeeperEnsemble(dir string, n int) (*ZooKeeperEnsemble, error) {
	ports, err := freePorts(3 * n)
	if err != nil {
		return nil, err
	}
	e := &ZooKeeperEnsemble{}
	var peers strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", i+1, ports[3*i+1], ports[3*i+2])
	}
	for i := 0; i < n; i++ {
		p := ports[3*i]
		e.Members = append(e.Members, &ZooKeeper{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), Port: p,
			dir: filepath.Join(dir, "zk"+strconv.Itoa(i+1)), id: i + 1, peers: peers.String()})
	}
	// No member serves before a quorum runs: launch all, then wait.
	exits := make([]<-chan struct{}, n)
	for i, m := range e.Members {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			e.stop()
			return nil, err
		}
		if exits[i], err = m.launch(); err != nil {
			e.stop()
			return nil, err
		}
	}
	for i, m := range e.Members {
		if err := m.awaitServing(exits[i]); err != nil {
			e.stop()
			return nil, err
		}
	}
	return e, nil
}
