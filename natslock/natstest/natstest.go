// Package natstest runs NATS servers with JetStream inside the test
// process, on loopback, for the tests of natslock and of the programs built
// on it: one server, or a cluster of three, each with a store directory of
// its own. It imports the NATS server, which natslock itself never does.
package natstest

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is one running NATS server with JetStream.
type Server struct {
	s    *server.Server
	opts *server.Options
	URL  string // its client URL, nats://127.0.0.1:port
}

// Options are the settings of the servers that Start and StartCluster run.
type Options struct {
	// SyncAlways has the servers sync their store to disk after every write
	// (jetstream sync_interval: always), as natslock's docs ask.
	SyncAlways bool
}

// Start runs one server whose store lives under dir (a directory of the
// caller's, which it removes afterwards), and waits until it takes
// connections.
func Start(dir string, o Options) (*Server, error) {
	var err error
	for range portTries {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		var s *Server
		if s, err = run(baseOptions("dlock-1", filepath.Join(dir, "n1"), port, o)); err == nil {
			return s, nil
		}
		if !errors.Is(err, errListen) {
			return nil, err
		}
	}
	return nil, err
}

// portTries is how many sets of free ports Start and StartCluster try: a
// port free a moment ago can be taken before the server binds it (by another
// process's listener, or as the local port of its outgoing connection).
const portTries = 5

// Cluster is three NATS servers with JetStream, routed to each other.
type Cluster struct {
	Servers []*Server
}

// URL is the client URL of every server of the cluster, comma separated.
func (c *Cluster) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL
	}
	return strings.Join(urls, ",")
}

// Shutdown stops every server of the cluster.
func (c *Cluster) Shutdown() {
	for _, s := range c.Servers {
		s.Shutdown()
	}
}

// StartCluster runs three servers routed to each other, each with its store
// under a directory of its own below dir, and waits until they take
// connections (JetStream elects its meta leader shortly after).
func StartCluster(dir string, o Options) (*Cluster, error) {
	var err error
	for try := range portTries {
		var c *Cluster
		// Each try in store directories of its own: a server that ran
		// leaves JetStream state behind.
		if c, err = startCluster(filepath.Join(dir, fmt.Sprintf("try%d", try)), o); err == nil {
			return c, nil
		}
		if !errors.Is(err, errListen) {
			return nil, err
		}
	}
	return nil, err
}

// startCluster is one try of StartCluster, on ports free a moment ago.
func startCluster(dir string, o Options) (*Cluster, error) {
	const n = 3
	ports := make([]int, 2*n)
	for i := range ports {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i])
	}
	c := &Cluster{}
	for i := range n {
		opts := baseOptions(fmt.Sprintf("dlock-%d", i+1), filepath.Join(dir, fmt.Sprintf("n%d", i+1)), ports[i], o)
		opts.Cluster = server.ClusterOpts{Name: "dlock", Host: "127.0.0.1", Port: ports[n+i]}
		opts.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		s, err := run(opts)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	return c, nil
}

// baseOptions are the options of one server.
func baseOptions(name, store string, port int, o Options) *server.Options {
	opts := &server.Options{
		ServerName: name,
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   store,
		NoLog:      true,
		NoSigs:     true,
		HTTPPort:   0,
	}
	if o.SyncAlways {
		opts.SyncAlways = true
		opts.SyncInterval = 2 * time.Minute
	}
	return opts
}

// run starts a server with opts and waits until it takes connections.
func run(opts *server.Options) (*Server, error) {
	if err := os.MkdirAll(opts.StoreDir, 0o755); err != nil {
		return nil, err
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("natstest: %w", err)
	}
	fatal := fatalLog{make(chan string, 1)}
	s.SetLoggerV2(fatal, false, false, false)
	go s.Start()
	// Ready, or told at once that a listener could not bind (the server
	// reports it only to its logger, and would wait for ever).
	for deadline := time.Now().Add(20 * time.Second); !s.ReadyForConnections(50 * time.Millisecond); {
		select {
		case msg := <-fatal.ch:
			s.Shutdown()
			s.WaitForShutdown()
			if !strings.Contains(strings.ToLower(msg), "listen") {
				return nil, fmt.Errorf("natstest: %s", msg) // not a port's: no other port helps
			}
			return nil, fmt.Errorf("%w: %s", errListen, msg)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, errors.New("natstest: the server did not take connections within 20s")
		}
	}
	return &Server{s: s, opts: opts, URL: s.ClientURL()}, nil
}

// errListen is run's error when the server could not listen on a port of its
// options (one taken since it was found free).
var errListen = errors.New("natstest: the server could not listen")

// fatalLog is the servers' logger: it passes on the first fatal error (a
// listener that could not bind), and drops the rest.
type fatalLog struct{ ch chan string }

// Fatalf passes the first fatal error on.
func (f fatalLog) Fatalf(format string, v ...any) {
	select {
	case f.ch <- fmt.Sprintf(format, v...):
	default:
	}
}

// Noticef drops the notice.
func (fatalLog) Noticef(string, ...any) {}

// Warnf drops the warning.
func (fatalLog) Warnf(string, ...any) {}

// Errorf drops the error.
func (fatalLog) Errorf(string, ...any) {}

// Debugf drops the debug statement.
func (fatalLog) Debugf(string, ...any) {}

// Tracef drops the trace statement.
func (fatalLog) Tracef(string, ...any) {}

// Shutdown stops the server and waits until it has.
func (s *Server) Shutdown() {
	s.s.Shutdown()
	s.s.WaitForShutdown()
}

// Restart stops the server and runs it again on the same port and store.
func (s *Server) Restart() error {
	s.Shutdown()
	var n *Server
	var err error
	// Its port was free while it ran; an outgoing connection may take it
	// as its local port meanwhile, for a while.
	for range 50 {
		if n, err = run(s.opts.Clone()); !errors.Is(err, errListen) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	s.s = n.s
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StoreDir is the directory the server keeps its JetStream store in.
func (s *Server) StoreDir() string { return s.opts.StoreDir }

// Snapshot copies the server's store directory to dst (which must not exist)
// while the server runs, each file as it is at the moment it is read (a file
// removed meanwhile is left out): with the default sync, what a disk may hold
// when the power goes. PowerLoss takes the server back to it.
func (s *Server) Snapshot(dst string) error {
	src := s.opts.StoreDir
	return filepath.WalkDir(src, func(path string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if e.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// PowerLoss emulates a power loss: the server stops, its store directory is
// replaced by the Snapshot at snap (which is gone afterwards), and it runs
// again on the same port, having lost every write since the snapshot.
func (s *Server) PowerLoss(snap string) error {
	s.Shutdown()
	if err := os.RemoveAll(s.opts.StoreDir); err != nil {
		return err
	}
	if err := os.Rename(snap, s.opts.StoreDir); err != nil {
		return err
	}
	return s.Restart()
}

// Name is the server's name, as JetStream's cluster information names it.
func (s *Server) Name() string { return s.opts.ServerName }
