// Package testserver starts real redis-server, etcd, ZooKeeper and PostgreSQL
// processes on free loopback ports for dlock's tests, and stops them when the
// test ends, also when it fails.
package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyTimeout bounds how long a started server may take to answer.
const readyTimeout = 15 * time.Second

// Redis is a redis-server process started for a test.
type Redis struct {
	Addr string // host:port on 127.0.0.1
	Port int

	dir  string
	args []string
	bin  string   // the executable ("": RedisBinary)
	env  []string // added to the process's environment (see StartRedisEnv)

	proc process
}

// RedisBinary is the redis-server executable to run; $DLOCK_REDIS_SERVER overrides.
func RedisBinary() (string, error) {
	return lookBinary("DLOCK_REDIS_SERVER", "redis-server", "redis-server")
}

// ValkeyBinary is the valkey-server executable to run; $DLOCK_VALKEY_SERVER
// overrides.
func ValkeyBinary() (string, error) {
	return lookBinary("DLOCK_VALKEY_SERVER", "valkey-server", "valkey-server")
}

// lookBinary finds the executable named by $envVar, or name, in PATH; the error
// names it and the Debian package pkg that installs it.
func lookBinary(envVar, name, pkg string) (string, error) {
	if v := os.Getenv(envVar); v != "" {
		name = v
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("testserver: %s not found in PATH (install it: apt-get install -y %s, or run ./test.sh as root): %w", name, pkg, err)
	}
	return p, nil
}

// StartRedis starts a redis-server with no persistence on a free loopback port and
// registers its shutdown with t.Cleanup. extra are additional redis-server
// arguments such as "--maxmemory-policy", "noeviction". It fails the test, naming
// the binary, when redis-server is missing.
func StartRedis(t testing.TB, extra ...string) *Redis {
	t.Helper()
	r, err := NewRedis(t.TempDir(), extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// StartRedisBinary is StartRedis with the server executable bin (for example
// the one ValkeyBinary returns) rather than RedisBinary's, for this server
// only; its restarts run bin too.
func StartRedisBinary(t testing.TB, bin string, extra ...string) *Redis {
	t.Helper()
	r, err := newRedis(t.TempDir(), bin, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// StartRedisEnv is StartRedis with env added to the server process's
// environment (for example a ClockShift's Env), for its restarts too.
func StartRedisEnv(t testing.TB, env []string, extra ...string) *Redis {
	t.Helper()
	if _, err := RedisBinary(); err != nil {
		t.Fatal(err)
	}
	var r *Redis
	err := onFreePort(func(port int) error {
		r = &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: t.TempDir(), env: env}
		r.args = append(redisArgs(port, r.dir), extra...)
		return r.Start()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// NewRedis starts a redis-server whose files live in dir. The caller must call
// Stop. It is StartRedis for code that has no testing.TB (TestMain, examples).
func NewRedis(dir string, extra ...string) (*Redis, error) {
	if _, err := RedisBinary(); err != nil {
		return nil, err
	}
	return newRedis(dir, "", extra...)
}

// newRedis starts the server executable bin ("": RedisBinary) on a free port.
func newRedis(dir, bin string, extra ...string) (*Redis, error) {
	var r *Redis
	err := onFreePort(func(port int) error {
		r = &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir, bin: bin}
		r.args = append(redisArgs(port, dir), extra...)
		return r.Start()
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// redisArgs are the arguments of a test server on port with its files in
// dir: no persistence, loopback only.
func redisArgs(port int, dir string) []string {
	return []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "yes",
	}
}

// onFreePort calls start with free loopback ports until it succeeds, a few times
// at most: a free port can be taken between the probe and the server's bind.
func onFreePort(start func(port int) error) error {
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			return err
		}
		if lastErr = start(port); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

// Start (re)starts the server process on its port with its arguments, and waits
// until it answers PING.
func (r *Redis) Start() error {
	bin := r.bin
	if bin == "" {
		var err error
		if bin, err = RedisBinary(); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, r.args...)
	if r.env != nil {
		cmd.Env = append(os.Environ(), r.env...)
	}
	return r.proc.run(cmd, filepath.Join(r.dir, "redis.log"),
		"redis-server on "+r.Addr, func() bool { return r.ping() == nil })
}

func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

// Stop kills the server (SIGKILL: no data is saved) and waits for it to exit. It is
// safe to call more than once.
func (r *Redis) Stop() { r.proc.stop() }

// Restart kills the server and starts it again on the same port: with no
// persistence, every key is gone.
func (r *Redis) Restart() error {
	r.Stop()
	return r.Start()
}

// Signal sends sig to the server process (for example SIGSTOP and SIGCONT).
func (r *Redis) Signal(sig os.Signal) error { return r.proc.signal(sig) }

// PID returns the server's process ID, or 0 when it is not running.
func (r *Redis) PID() int { return r.proc.pid() }

// process is one server process started for a test, with its output in a log file.
type process struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	logs    *os.File
	logPath string
}

// run starts cmd (see start) and waits until ready reports true; name says what
// the server is in errors. A server that exits or is not ready in time is
// stopped, and the error ends with its log.
func (p *process) run(cmd *exec.Cmd, logPath, name string, ready func() bool) error {
	exited, err := p.start(cmd, logPath)
	if err != nil {
		return err
	}
	return p.awaitReady(exited, name, ready)
}

// awaitReady waits until ready reports true for the process started with the
// exit channel exited (see run).
func (p *process) awaitReady(exited <-chan struct{}, name string, ready func() bool) error {
	var err error
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-exited:
			err = fmt.Errorf("testserver: %s exited during start-up", name)
		default:
			if ready() {
				return nil
			}
			if !time.Now().Before(deadline) {
				err = fmt.Errorf("testserver: %s not ready after %v", name, readyTimeout)
			}
		}
		if err != nil {
			p.stop()
			return fmt.Errorf("%w\n%s", err, p.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// start starts cmd with its output appended to logPath (the process is killed if
// the test binary dies) and returns a channel closed when it exits.
func (p *process) start(cmd *exec.Cmd, logPath string) (<-chan struct{}, error) {
	logs, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logs, logs
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logs.Close()
		return nil, fmt.Errorf("testserver: start %s: %w", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done, p.logs, p.logPath = cmd, done, logs, logPath
	p.mu.Unlock()
	return done, nil
}

// stop kills the process and waits for it to exit; safe to call more than once.
func (p *process) stop() {
	p.mu.Lock()
	cmd, done, logs := p.cmd, p.done, p.logs
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
	logs.Close()
}

func (p *process) signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.New("testserver: not running")
	}
	return p.cmd.Process.Signal(sig)
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// tail returns the end of the process's log, for error messages.
func (p *process) tail() string {
	p.mu.Lock()
	path := p.logPath
	p.mu.Unlock()
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
