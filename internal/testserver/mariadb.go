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
	"syscall"
	"testing"
	"time"
)

// MariaDB is a MariaDB server (one mariadbd and its data directory) started
// for a test. Its root user has no password and may connect from the
// loopback: connect as root to database "dlock" (see DSN), which the server is
// started with.
type MariaDB struct {
	Addr string // host:port on 127.0.0.1
	Port int
	DSN  string // root@tcp(Addr)/dlock, for github.com/go-sql-driver/mysql

	bin     string // mariadbd
	dir     string // the server's directory: data, socket, pid file, log
	data    string
	logPath string
	// serverID, when not 0, is the server's replication id: its binary log
	// is on (see MariaDBOptions).
	serverID int

	proc process
}

// MariaDBOptions change how NewMariaDBWith starts a server.
type MariaDBOptions struct {
	// ServerID, when not 0, starts the server with this replication id,
	// its binary log on (row format) and its replica threads stopped until
	// told to start: what a replication primary, or a replica that may be
	// promoted, needs.
	ServerID int
}

// MariaDBBinaries returns the paths of mariadbd and mariadb-install-db: those
// under $DLOCK_MARIADB_BIN when set (a directory holding both), else the ones
// found in PATH, /usr/sbin or /usr/bin.
func MariaDBBinaries() (server, install string, err error) {
	if v := os.Getenv("DLOCK_MARIADB_BIN"); v != "" {
		server, install = filepath.Join(v, "mariadbd"), filepath.Join(v, "mariadb-install-db")
		for _, p := range []string{server, install} {
			if _, err := os.Stat(p); err != nil {
				return "", "", fmt.Errorf("testserver: $DLOCK_MARIADB_BIN: %w", err)
			}
		}
		return server, install, nil
	}
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
			if p := filepath.Join(dir, name); fileExists(p) {
				return p
			}
		}
		return ""
	}
	server, install = find("mariadbd"), find("mariadb-install-db")
	if server == "" || install == "" {
		return "", "", errors.New("testserver: mariadbd or mariadb-install-db not found in PATH, /usr/sbin nor /usr/bin (install them: apt-get install -y mariadb-server)")
	}
	return server, install, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// StartMariaDB starts a MariaDB server on a free loopback port with its data
// in a fresh directory, and registers its shutdown with t.Cleanup. It fails
// the test, naming the package to install, when MariaDB is missing.
func StartMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	m, err := NewMariaDB(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// NewMariaDB creates a data directory under dir (mariadb-install-db) and
// starts a server on a free loopback port, with its own socket and pid files
// in dir. The caller must call Stop. It is StartMariaDB for code that has no
// testing.TB (TestMain).
func NewMariaDB(dir string) (*MariaDB, error) {
	return NewMariaDBWith(dir, MariaDBOptions{})
}

// StartMariaDBWith is StartMariaDB with options.
func StartMariaDBWith(t testing.TB, o MariaDBOptions) *MariaDB {
	t.Helper()
	m, err := NewMariaDBWith(t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return m
}

// NewMariaDBWith is NewMariaDB with options.
func NewMariaDBWith(dir string, o MariaDBOptions) (*MariaDB, error) {
	server, install, err := MariaDBBinaries()
	if err != nil {
		return nil, err
	}
	m := &MariaDB{bin: server, dir: dir, data: filepath.Join(dir, "data"), logPath: filepath.Join(dir, "mariadb.log"), serverID: o.ServerID}
	args := []string{"--no-defaults", "--datadir=" + m.data, "--auth-root-authentication-method=normal", "--skip-test-db"}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	// A temporary directory of its own: servers installed at once would
	// otherwise share /tmp for their temporary tables.
	if err := os.MkdirAll(m.tmp(), 0o700); err != nil {
		return nil, err
	}
	cmd := exec.Command(install, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+m.tmp())
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testserver: mariadb-install-db: %w\n%s", err, out)
	}
	// The database of the tests, created before the first start: a
	// directory of the data directory is a database.
	if err := os.Mkdir(filepath.Join(m.data, "dlock"), 0o700); err != nil {
		return nil, err
	}
	err = onFreePort(func(port int) error {
		m.Port = port
		m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		m.DSN = "root@tcp(" + m.Addr + ")/dlock"
		return m.Start()
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// tmp is the server's temporary directory.
func (m *MariaDB) tmp() string { return filepath.Join(m.dir, "tmp") }

// Start (re)starts the server on its port with its data directory, and waits
// until it accepts connections. A restarted server keeps its committed data
// (after crash recovery when it was stopped with Kill).
func (m *MariaDB) Start() error {
	args := []string{"--no-defaults",
		"--datadir=" + m.data,
		"--port=" + strconv.Itoa(m.Port),
		"--bind-address=127.0.0.1",
		"--tmpdir=" + m.tmp(),
		"--socket=" + filepath.Join(m.dir, "mariadb.sock"),
		"--pid-file=" + filepath.Join(m.dir, "mariadb.pid"),
		"--skip-name-resolve",
		"--max-connections=300",
		"--innodb-buffer-pool-size=64M",
		"--innodb-log-file-size=16M",
		// Commits are durable against a crash of the server (the log is
		// written at each commit), not of the machine: tests stop the
		// server, never the machine.
		"--innodb-flush-log-at-trx-commit=2",
		"--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_bin",
	}
	if m.serverID != 0 {
		args = append(args, "--log-bin=binlog", "--binlog-format=ROW", "--server-id="+strconv.Itoa(m.serverID), "--skip-slave-start")
	} else {
		args = append(args, "--skip-log-bin")
	}
	if os.Geteuid() == 0 {
		args = append(args, "--user=root")
	}
	return m.proc.run(exec.Command(m.bin, args...), m.logPath, "mariadbd on "+m.Addr, func() bool { return m.ping() == nil })
}

// ping opens a connection and reads the server's greeting: a handshake packet
// of protocol 10 once the server accepts connections.
func (m *MariaDB) ping() error {
	c, err := net.DialTimeout("tcp", m.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var head [5]byte // 3 bytes of length, the sequence number, the protocol
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return err
	}
	if head[4] != 10 {
		return fmt.Errorf("testserver: mariadbd greeted with packet kind %#x", head[4])
	}
	return nil
}

// Kill kills the server (SIGKILL: a crash; the next start recovers from the
// InnoDB log) and waits for it to exit. The data stays. It is safe to call
// more than once.
func (m *MariaDB) Kill() { m.proc.stop() }

// Stop shuts the server down (SIGTERM) and waits for it to exit; a server
// that does not exit in time is killed. The data stays. It is safe to call
// more than once.
func (m *MariaDB) Stop() {
	m.proc.mu.Lock()
	done := m.proc.done
	running := m.proc.cmd != nil
	m.proc.mu.Unlock()
	if running && m.proc.signal(syscall.SIGTERM) == nil {
		select {
		case <-done:
		case <-time.After(shutdownTimeout):
		}
	}
	m.proc.stop()
}

// Restart kills the server (see Kill) and starts it again on the same port
// with the same data.
func (m *MariaDB) Restart() error {
	m.Kill()
	return m.Start()
}

// Signal sends sig to the server (for example SIGSTOP and SIGCONT).
func (m *MariaDB) Signal(sig os.Signal) error { return m.proc.signal(sig) }

// PID returns the server's process ID, or 0 when it is not running.
func (m *MariaDB) PID() int { return m.proc.pid() }

// MainMariaDB is Main with one MariaDB server (see NewMariaDB) instead of a
// redis-server: the data directory's creation is paid once per test binary.
func MainMariaDB(m *testing.M, use func(*MariaDB)) int {
	return runMain(m, func(dir string) (func(), error) {
		srv, err := NewMariaDB(dir)
		if err != nil {
			return nil, err
		}
		use(srv)
		return srv.Stop, nil
	})
}
