package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Raft timing of the etcd members started here. A single member has no peers
// to lose, so it runs with the shortest intervals etcd accepts and starts in a
// few milliseconds; a cluster's members leave room for a loaded machine so
// that they do not depose their leader without a fault. With either, the
// shortest lease etcd grants is 1s (it raises shorter requests to 1.5 election
// timeouts, rounded up to whole seconds).
const (
	singleHeartbeat, singleElection   = 10, 100 // ms
	clusterHeartbeat, clusterElection = 50, 500 // ms
)

// Etcd is an etcd member started for a test: alone (StartEtcd) or in a cluster
// (StartEtcdCluster).
type Etcd struct {
	Name      string
	Addr      string // client host:port on 127.0.0.1
	ClientURL string // http://Addr
	PeerURL   string // the URL it listens on for its peers
	// AdvertisePeerURL is the URL its peers dial to reach it: PeerURL, or
	// the address EtcdClusterOptions.PeerAddr gave (a proxy in front of it).
	AdvertisePeerURL string

	dir  string
	args []string
	proc process
}

// Stop kills the member (SIGKILL) and waits for it to exit. It is safe to call
// more than once.
func (e *Etcd) Stop() { e.proc.stop() }

// Signal sends sig to the member's process (for example SIGSTOP and SIGCONT).
func (e *Etcd) Signal(sig os.Signal) error { return e.proc.signal(sig) }

// PID returns the member's process ID, or 0 when it is not running.
func (e *Etcd) PID() int { return e.proc.pid() }

// EtcdBinary is the etcd server executable to run; $DLOCK_ETCD overrides.
func EtcdBinary() (string, error) { return lookBinary("DLOCK_ETCD", "etcd", "etcd-server") }

// StartEtcd starts a single-member etcd on free loopback ports (client and peer)
// with its data in a directory of t.TempDir, and registers its shutdown with
// t.Cleanup. It fails the test, naming the binary, when etcd is missing.
func StartEtcd(t testing.TB) *Etcd {
	t.Helper()
	e, err := NewEtcd(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	return e
}

// NewEtcd starts a single-member etcd whose data lives under dir. The caller must
// call Stop. It is StartEtcd for code that has no testing.TB (TestMain).
func NewEtcd(dir string) (*Etcd, error) {
	if _, err := EtcdBinary(); err != nil {
		return nil, err
	}
	var lastErr error
	for try := 0; try < 5; try++ { // a free port can be taken between probe and bind
		ports, err := freePorts(2)
		if err != nil {
			return nil, err
		}
		e := newMember("etcd0", dir, ports[0], ports[1])
		e.configure(e.Name+"="+e.AdvertisePeerURL, singleHeartbeat, singleElection)
		if lastErr = e.Start(); lastErr == nil {
			return e, nil
		}
	}
	return nil, lastErr
}

func newMember(name, dir string, clientPort, peerPort int) *Etcd {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort))
	peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))
	return &Etcd{
		Name:             name,
		Addr:             addr,
		ClientURL:        "http://" + addr,
		PeerURL:          peer,
		AdvertisePeerURL: peer,
		dir:              dir,
	}
}

// configure sets the member's command line for a cluster whose members are
// listed in initialCluster (name=peerURL,...).
func (e *Etcd) configure(initialCluster string, heartbeat, election int) {
	e.args = []string{
		"--name", e.Name,
		"--data-dir", filepath.Join(e.dir, e.Name+".etcd"),
		"--listen-client-urls", e.ClientURL, "--advertise-client-urls", e.ClientURL,
		"--listen-peer-urls", e.PeerURL, "--initial-advertise-peer-urls", e.AdvertisePeerURL,
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", "new", "--initial-cluster-token", "dlock-test",
		"--heartbeat-interval", strconv.Itoa(heartbeat), "--election-timeout", strconv.Itoa(election),
		"--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn",
	}
}

// Start (re)starts the member with its data directory and waits until it reports
// itself healthy (it has a leader). Restarting a killed member keeps its data.
func (e *Etcd) Start() error {
	done, err := e.launch()
	if err != nil {
		return err
	}
	return e.waitReady(done)
}

// Restart kills the member and starts it again with the same data.
func (e *Etcd) Restart() error {
	e.Stop()
	return e.Start()
}

func (e *Etcd) launch() (<-chan struct{}, error) {
	bin, err := EtcdBinary()
	if err != nil {
		return nil, err
	}
	return e.proc.start(exec.Command(bin, e.args...), filepath.Join(e.dir, e.Name+".log"))
}

func (e *Etcd) waitReady(exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var err error
	for {
		select {
		case <-exited:
			e.Stop()
			return fmt.Errorf("testserver: etcd %s on %s exited during start-up\n%s", e.Name, e.Addr, e.proc.tail())
		default:
		}
		if err = e.healthy(ctx); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			e.Stop()
			return fmt.Errorf("testserver: etcd %s on %s not healthy after %v: %v\n%s", e.Name, e.Addr, readyTimeout, err, e.proc.tail())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// healthy asks the member's /health endpoint, which is true once it has a leader.
func (e *Etcd) healthy(ctx context.Context) error {
	var h struct{ Health string }
	if err := e.call(ctx, http.MethodGet, "/health", &h); err != nil {
		return err
	}
	if h.Health != "true" {
		return fmt.Errorf("health %q", h.Health)
	}
	return nil
}

// EtcdStatus is what a member says of itself and of the cluster's leader.
type EtcdStatus struct {
	MemberID uint64
	Leader   uint64 // the leader's member ID, 0 when none is known
}

// Status asks the member for its ID and the leader it follows, over the JSON
// gateway.
func (e *Etcd) Status(ctx context.Context) (EtcdStatus, error) {
	var s struct {
		Header struct {
			MemberID string `json:"member_id"`
		}
		Leader string
	}
	if err := e.call(ctx, http.MethodPost, "/v3/maintenance/status", &s); err != nil {
		return EtcdStatus{}, err
	}
	id, err := strconv.ParseUint(s.Header.MemberID, 10, 64)
	if err != nil {
		return EtcdStatus{}, fmt.Errorf("testserver: etcd %s status: member id %q", e.Name, s.Header.MemberID)
	}
	leader, _ := strconv.ParseUint(s.Leader, 10, 64)
	return EtcdStatus{MemberID: id, Leader: leader}, nil
}

func (e *Etcd) call(ctx context.Context, method, path string, out any) error {
	in := ""
	if method == http.MethodPost {
		in = "{}"
	}
	return e.callWith(ctx, method, path, in, out)
}

// callWith is call with the request body in (JSON; "" for none).
func (e *Etcd) callWith(ctx context.Context, method, path, in string, out any) error {
	var body io.Reader
	if in != "" {
		body = strings.NewReader(in)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, e.ClientURL+path, body)
	if err != nil {
		return err
	}
	resp, err := etcdHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	return json.Unmarshal(b, out)
}

// etcdHTTP keeps no idle connections, so that no transport goroutine outlives a
// call (the tests check for leaked goroutines).
var etcdHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// EtcdCluster is a cluster of etcd members started for a test.
type EtcdCluster struct {
	Members []*Etcd
}

// Endpoints returns the members' client addresses.
func (c *EtcdCluster) Endpoints() []string {
	a := make([]string, len(c.Members))
	for i, m := range c.Members {
		a[i] = m.Addr
	}
	return a
}

// Leader returns the member that the running members agree leads the cluster,
// waiting (bounded by ctx) while there is none or they disagree.
func (c *EtcdCluster) Leader(ctx context.Context) (*Etcd, error) {
	for {
		var leader *Etcd
		agreed, running := true, 0
		var want uint64
		for _, m := range c.Members {
			if m.PID() == 0 {
				continue
			}
			running++
			s, err := m.Status(ctx)
			if err != nil || s.Leader == 0 || (want != 0 && s.Leader != want) {
				agreed = false
				break
			}
			want = s.Leader
			if s.MemberID == s.Leader {
				leader = m
			}
		}
		if agreed && leader != nil && running > 0 {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: no agreed etcd leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StartEtcdCluster starts n (at least 1) etcd members on free loopback ports,
// each with its data in a directory of t.TempDir, and waits until every member
// is healthy. All of them are stopped by t.Cleanup, also when the start fails
// half way.
func StartEtcdCluster(t testing.TB, n int) *EtcdCluster {
	t.Helper()
	return StartEtcdClusterWith(t, n, EtcdClusterOptions{})
}

// EtcdClusterOptions change how StartEtcdClusterWith starts a cluster.
type EtcdClusterOptions struct {
	// PeerAddr, when set, is called before the members start with each
	// member's number and the host:port it listens on for its peers; it
	// returns the host:port the other members dial to reach it instead (a
	// proxy that forwards to listen, say), which the member advertises.
	PeerAddr func(member int, listen string) (string, error)
}

// StartEtcdClusterWith is StartEtcdCluster with options.
func StartEtcdClusterWith(t testing.TB, n int, o EtcdClusterOptions) *EtcdCluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: etcd cluster of %d members", n)
	}
	if _, err := EtcdBinary(); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for try := 0; try < 3; try++ {
		c, err := startEtcdCluster(t.TempDir(), n, o)
		if err == nil {
			t.Cleanup(func() {
				for _, m := range c.Members {
					m.Stop()
				}
			})
			return c
		}
		lastErr = err
	}
	t.Fatal(lastErr)
	return nil
}

func startEtcdCluster(dir string, n int, o EtcdClusterOptions) (*EtcdCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	c := &EtcdCluster{}
	var initial []string
	for i := 0; i < n; i++ {
		m := newMember("etcd"+strconv.Itoa(i), dir, ports[2*i], ports[2*i+1])
		if o.PeerAddr != nil {
			a, err := o.PeerAddr(i, strings.TrimPrefix(m.PeerURL, "http://"))
			if err != nil {
				return nil, err
			}
			m.AdvertisePeerURL = "http://" + a
		}
		c.Members = append(c.Members, m)
		initial = append(initial, m.Name+"="+m.AdvertisePeerURL)
	}
	stopAll := func() {
		for _, m := range c.Members {
			m.Stop()
		}
	}
	// Every member must run before any can elect a leader: launch all, then wait.
	exits := make([]<-chan struct{}, n)
	for i, m := range c.Members {
		m.configure(strings.Join(initial, ","), clusterHeartbeat, clusterElection)
		if exits[i], err = m.launch(); err != nil {
			stopAll()
			return nil, err
		}
	}
	for i, m := range c.Members {
		if err := m.waitReady(exits[i]); err != nil {
			stopAll()
			return nil, err
		}
	}
	return c, nil
}

// Replace removes the member old from the cluster, as an operator replaces a
// lost machine: old is killed, removed (MemberRemove, through a running
// member), and a new member with an empty data directory is added
// (MemberAdd) and started on new ports, joining the cluster's existing
// state. The new member takes old's place in c.Members.
func (c *EtcdCluster) Replace(ctx context.Context, old *Etcd) (*Etcd, error) {
	var via *Etcd
	for _, m := range c.Members {
		if m != old && m.PID() != 0 {
			via = m
			break
		}
	}
	if via == nil {
		return nil, fmt.Errorf("testserver: no running member besides %s to replace it through", old.Name)
	}
	var list struct {
		Members []struct {
			ID       string
			Name     string
			PeerURLs []string
		}
	}
	if err := via.call(ctx, http.MethodPost, "/v3/cluster/member/list", &list); err != nil {
		return nil, err
	}
	id := ""
	for _, m := range list.Members {
		if m.Name == old.Name {
			id = m.ID
		}
	}
	if id == "" {
		return nil, fmt.Errorf("testserver: %s is no member of the cluster", old.Name)
	}
	old.Stop()
	var out struct{}
	// A removal commits through raft, which may take longer than a call's
	// second while the cluster notices the lost member: try again (a second
	// try of a removal that landed finds no such member).
	for {
		err := via.callWith(ctx, http.MethodPost, "/v3/cluster/member/remove", `{"ID":"`+id+`"}`, &out)
		if err == nil || strings.Contains(err.Error(), "member not found") {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: removing %s: %w (%w)", old.Name, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	m := newMember(old.Name+"r", old.dir, ports[0], ports[1])
	b, _ := json.Marshal(map[string][]string{"peerURLs": {m.AdvertisePeerURL}})
	// etcd refuses to add a member until the others have been connected to
	// each other for its health interval (five seconds): a cluster started a
	// moment ago, or one that just lost a member, waits for that.
	for {
		err := via.callWith(ctx, http.MethodPost, "/v3/cluster/member/add", string(b), &out)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("testserver: adding a member: %w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	var initial []string
	for _, x := range c.Members {
		if x != old {
			initial = append(initial, x.Name+"="+x.AdvertisePeerURL)
		}
	}
	initial = append(initial, m.Name+"="+m.AdvertisePeerURL)
	m.configure(strings.Join(initial, ","), clusterHeartbeat, clusterElection)
	for i, a := range m.args {
		if a == "new" && i > 0 && m.args[i-1] == "--initial-cluster-state" {
			m.args[i] = "existing"
		}
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	for i, x := range c.Members {
		if x == old {
			c.Members[i] = m
		}
	}
	return m, nil
}

// freePorts returns k distinct TCP ports on 127.0.0.1 that were free a moment ago.
func freePorts(k int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, k)
	for len(ports) < k {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
