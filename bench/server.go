package main

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
	"syscall"
	"time"
)

// serverReadyTimeout bounds how long a started redis-server may take to answer.
const serverReadyTimeout = 15 * time.Second

// server is a redis-server process started by the bench on a free loopback port,
// with no persistence, in a temporary directory that Stop removes.
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
	logs *os.File
}

// startServer starts bin (a redis-server executable) on a free port of 127.0.0.1
// and waits until it answers PING. A port taken between the probe and the bind is
// retried with another one.
func startServer(bin string) (*server, error) {
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("bench: %s not found in PATH (install it: apt-get install -y redis-server, or pass -redis-server): %w", bin, err)
	}
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(path, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func launch(path string, port int) (*server, error) {
	dir, err := os.MkdirTemp("", "dlock-bench-redis-")
	if err != nil {
		return nil, err
	}
	logs, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &server{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, logs: logs, done: make(chan struct{})}
	s.cmd = exec.Command(path,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir,
		"--daemonize", "no", "--protected-mode", "yes")
	s.cmd.Stdout, s.cmd.Stderr = logs, logs
	// The server dies with the bench even if the bench is killed.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		logs.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("bench: start %s: %w", path, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(); err != nil {
		tail := s.tail()
		s.Stop()
		return nil, fmt.Errorf("%w\n%s", err, tail)
	}
	return s, nil
}

func (s *server) waitReady() error {
	deadline := time.Now().Add(serverReadyTimeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("bench: redis-server on %s exited during start-up", s.addr)
		default:
		}
		if ping(s.addr) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("bench: redis-server on %s not ready after %v", s.addr, serverReadyTimeout)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
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

// Stop kills the server, waits for it to exit and removes its directory. It is
// safe to call more than once.
func (s *server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
	s.logs.Close()
	_ = os.RemoveAll(s.dir)
}

func (s *server) tail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
