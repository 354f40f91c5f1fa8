package testserver

import (
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
// until it serves requests.
func (z *ZooKeeper) Start() error {
	cmd, err := ZooKeeperCommand()
	if err != nil {
		return err
	}
	cfg := filepath.Join(z.dir, "zoo.cfg")
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
		filepath.Join(z.dir, "data"), z.Port)
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	args := append(cmd[1:], "org.apache.zookeeper.server.ZooKeeperServerMain", cfg)
	// "ruok" answers before the server serves requests; srvr names the mode
	// only once it does.
	return z.proc.run(exec.Command(cmd[0], args...), filepath.Join(z.dir, "zookeeper.log"),
		"ZooKeeper on "+z.Addr, func() bool {
			out, err := z.FourLetter("srvr")
			return err == nil && strings.Contains(out, "Mode: ")
		})
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
