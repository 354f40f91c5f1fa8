package testserver

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server (one postmaster and its data directory)
// started for a test. It trusts every loopback connection: connect as user
// "postgres" to database "postgres" (see URL).
type Postgres struct {
	Addr string // host:port on 127.0.0.1
	Port int
	URL  string // postgres://postgres@Addr/postgres?sslmode=disable

	bin     string // the directory of initdb and postgres
	data    string // the data directory
	logPath string
	ownDir  string // a directory NewPostgres created (as root) and Remove deletes
	cred    *syscall.Credential

	proc process
}

// shutdownTimeout bounds how long an immediate shutdown may take before the
// postmaster is killed.
const shutdownTimeout = 10 * time.Second

// PostgresBinDir returns the directory holding initdb and postgres: that of
// $DLOCK_POSTGRES_BIN when set, else of the initdb found in PATH (its links
// followed), else the newest /usr/lib/postgresql/*/bin.
func PostgresBinDir() (string, error) {
	if v := os.Getenv("DLOCK_POSTGRES_BIN"); v != "" {
		if _, err := os.Stat(filepath.Join(v, "initdb")); err != nil {
			return "", fmt.Errorf("testserver: $DLOCK_POSTGRES_BIN: %w", err)
		}
		return v, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "initdb")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("testserver: initdb not found in PATH nor in /usr/lib/postgresql/*/bin (install it: apt-get install -y postgresql, or run ./test.sh as root)")
}

// pgVersion reads the major version out of /usr/lib/postgresql/VERSION/bin.
func pgVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartPostgres starts a PostgreSQL server on a free loopback port with its data
// in a fresh directory, and registers its shutdown and the removal of its data
// with t.Cleanup. It fails the test, naming the package to install, when
// PostgreSQL is missing.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	p, err := NewPostgres(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Remove)
	return p
}

// NewPostgres creates a database cluster (initdb) and starts its server on a
// free loopback port. Its files live under dir, or, when the process runs as
// root (PostgreSQL refuses to run as root), in a directory of its own owned by
// the "postgres" user, which is created if it does not exist. The caller must
// call Remove. It is StartPostgres for code that has no testing.TB (TestMain).
func NewPostgres(dir string) (*Postgres, error) {
	bin, err := PostgresBinDir()
	if err != nil {
		return nil, err
	}
	p := &Postgres{bin: bin}
	if os.Geteuid() == 0 {
		if p.cred, err = postgresUser(); err != nil {
			return nil, err
		}
		if dir, err = os.MkdirTemp("", "dlock-postgres"); err != nil {
			return nil, err
		}
		p.ownDir = dir
		if err := os.Chown(dir, int(p.cred.Uid), int(p.cred.Gid)); err != nil {
			p.Remove()
			return nil, err
		}
	}
	p.data = filepath.Join(dir, "data")
	p.logPath = filepath.Join(dir, "postgres.log")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", p.data, "-U", "postgres",
		"-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		p.Remove()
		return nil, fmt.Errorf("testserver: initdb: %w\n%s", err, out)
	}
	err = onFreePort(func(port int) error {
		p.Port = port
		p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p.URL = "postgres://postgres@" + p.Addr + "/postgres?sslmode=disable"
		return p.Start()
	})
	if err != nil {
		p.Remove()
		return nil, err
	}
	return p, nil
}

// postgresUser returns the credentials of the "postgres" user, creating it
// (a system user without a home) when it does not exist.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		if out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "postgres").CombinedOutput(); aerr != nil {
			return nil, fmt.Errorf("testserver: PostgreSQL does not run as root, and creating the postgres user failed: %w\n%s", aerr, out)
		}
		if u, err = user.Lookup("postgres"); err != nil {
			return nil, err
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// Start (re)starts the server on its port with its data directory, and waits
// until it accepts connections. A restarted server keeps its data (after crash
// recovery when it was stopped with Stop).
func (p *Postgres) Start() error {
	cmd := exec.Command(filepath.Join(p.bin, "postgres"), "-D", p.data,
		"-p", strconv.Itoa(p.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=",
		"-c", "fsync=off",
		"-c", "max_connections=200",
		"-c", "log_min_messages=warning",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	return p.proc.run(cmd, p.logPath, "postgres on "+p.Addr, func() bool { return p.ping() == nil })
}

// ping opens a connection and reads the server's first answer to the startup
// message: an authentication request ('R') once the server accepts
// connections, an error ('E') while it starts up or shuts down.
func (p *Postgres) ping() error {
	c, err := net.DialTimeout("tcp", p.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	params := "user\x00postgres\x00database\x00postgres\x00\x00"
	msg := make([]byte, 8, 8+len(params))
	binary.BigEndian.PutUint32(msg, uint32(8+len(params)))
	binary.BigEndian.PutUint32(msg[4:], 3<<16) // protocol 3.0
	if _, err := c.Write(append(msg, params...)); err != nil {
		return err
	}
	var kind [1]byte
	if _, err := io.ReadFull(c, kind[:]); err != nil {
		return err
	}
	if kind[0] != 'R' {
		return fmt.Errorf("testserver: postgres answered %q to a startup message", kind[0])
	}
	return nil
}

// Stop shuts the server down at once (SIGQUIT: no checkpoint, the next start
// recovers from the WAL, as after a crash) and waits for it to exit; a server
// that does not exit in time is killed. The data stays. It is safe to call more
// than once.
func (p *Postgres) Stop() {
	p.proc.mu.Lock()
	done := p.proc.done
	running := p.proc.cmd != nil
	p.proc.mu.Unlock()
	if running && p.proc.signal(syscall.SIGQUIT) == nil {
		select {
		case <-done:
		case <-time.After(shutdownTimeout):
		}
	}
	p.proc.stop()
}

// Restart stops the server (see Stop) and starts it again on the same port with
// the same data.
func (p *Postgres) Restart() error {
	p.Stop()
	return p.Start()
}

// Remove stops the server and deletes the directory NewPostgres created for its
// data, if it created one. It is safe to call more than once.
func (p *Postgres) Remove() {
	p.Stop()
	if p.ownDir != "" {
		_ = os.RemoveAll(p.ownDir)
	}
}

// Signal sends sig to the postmaster (for example SIGSTOP and SIGCONT; the
// server's other processes keep running).
func (p *Postgres) Signal(sig os.Signal) error { return p.proc.signal(sig) }

// PID returns the postmaster's process ID, or 0 when it is not running.
func (p *Postgres) PID() int { return p.proc.pid() }

// MainPostgres is Main with one PostgreSQL server (see NewPostgres) instead of
// a redis-server: initdb is paid once per test binary.
func MainPostgres(m *testing.M, use func(*Postgres)) int {
	return runMain(m, func(dir string) (func(), error) {
		srv, err := NewPostgres(dir)
		if err != nil {
			return nil, err
		}
		use(srv)
		return srv.Remove, nil
	})
}
