package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster started for a test.
type Cluster struct {
	// Nodes are the masters, in the order of their slot ranges.
	Nodes []*Redis
	// Replicas[i] are the replicas of Nodes[i] (empty for StartCluster).
	Replicas [][]*Redis
}

// Addrs returns the masters' addresses, to seed a redis.ClusterClient.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr
	}
	return a
}

// StartCluster starts n (at least 1) cluster-enabled redis-servers on free
// loopback ports, splits the 16384 slots among them, joins them and waits until
// every node reports cluster_state:ok. All of it is stopped by t.Cleanup.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterWithReplicas(t, n, 0)
}

// StartClusterWithReplicas starts a cluster of masters (at least 1) as
// StartCluster does, each with replicasPerMaster replicas (CLUSTER REPLICATE),
// and waits until every node reports cluster_state:ok and every replica's link
// to its master is up and its initial sync done. The nodes declare a silent
// peer failing after 2 seconds (cluster-node-timeout), so a replica promotes
// itself within seconds of its master's death. Each node is started with extra
// arguments after its own. All of it is stopped by t.Cleanup.
func StartClusterWithReplicas(t testing.TB, masters, replicasPerMaster int, extra ...string) *Cluster {
	t.Helper()
	if masters < 1 || replicasPerMaster < 0 {
		t.Fatalf("testserver: cluster of %d masters with %d replicas each", masters, replicasPerMaster)
	}
	c := &Cluster{Replicas: make([][]*Redis, masters)}
	start := func(name string) *Redis {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := newClusterNode(dir, extra...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		return r
	}
	for i := 0; i < masters; i++ {
		c.Nodes = append(c.Nodes, start(strconv.Itoa(i)))
		for j := 0; j < replicasPerMaster; j++ {
			c.Replicas[i] = append(c.Replicas[i], start(strconv.Itoa(i)+"r"+strconv.Itoa(j)))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// newClusterNode starts one cluster-enabled node whose bus port (port+10000) is
// free too, with extra arguments after its own.
func newClusterNode(dir string, extra ...string) (*Redis, error) {
	var lastErr error
	for try := 0; try < 20; try++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if port+10000 > 65535 || !portFree(port+10000) {
			continue
		}
		r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir}
		r.args = []string{
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000", "--repl-diskless-sync-delay", "0",
		}
		r.args = append(r.args, extra...)
		if lastErr = r.Start(); lastErr == nil {
			return r, nil
		}
	}
	return nil, fmt.Errorf("testserver: no cluster node started: %v", lastErr)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func (c *Cluster) form(ctx context.Context) error {
	type node struct {
		*Redis
		cl      *redis.Client
		master  int  // index in c.Nodes of the node or of its master
		replica bool // a replica of c.Nodes[master]
	}
	var nodes []node
	for i, m := range c.Nodes {
		for j, r := range append([]*Redis{m}, c.Replicas[i]...) {
			nodes = append(nodes, node{r, redis.NewClient(&redis.Options{Addr: r.Addr}), i, j > 0})
		}
	}
	defer func() {
		for _, n := range nodes {
			n.cl.Close()
		}
	}()
	const slots = 16384
	ids := make([]string, len(c.Nodes))
	for i, n := range nodes {
		if m := n.master; !n.replica {
			lo, hi := m*slots/len(c.Nodes), (m+1)*slots/len(c.Nodes)-1
			if err := n.cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				return fmt.Errorf("testserver: ADDSLOTSRANGE on %s: %w", n.Addr, err)
			}
			id, err := n.cl.Do(ctx, "CLUSTER", "MYID").Text()
			if err != nil {
				return fmt.Errorf("testserver: CLUSTER MYID on %s: %w", n.Addr, err)
			}
			ids[m] = id
		}
		if i > 0 {
			if err := n.cl.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(c.Nodes[0].Port)).Err(); err != nil {
				return fmt.Errorf("testserver: CLUSTER MEET: %w", err)
			}
		}
	}
	known := "cluster_known_nodes:" + strconv.Itoa(len(nodes))
	replicated := false
	for {
		ok := true
		for _, n := range nodes {
			info, err := n.cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, known) {
				ok = false
				break
			}
		}
		if ok && !replicated {
			// Every node knows every other: the replicas can follow their masters.
			for _, n := range nodes {
				if !n.replica {
					continue
				}
				if err := n.cl.Do(ctx, "CLUSTER", "REPLICATE", ids[n.master]).Err(); err != nil {
					return fmt.Errorf("testserver: CLUSTER REPLICATE on %s: %w", n.Addr, err)
				}
			}
			replicated = true
			ok = false
		}
		for _, n := range nodes {
			if !ok {
				break
			}
			if n.replica {
				info, err := n.cl.Info(ctx, "replication").Result()
				ok = err == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(info, "master_sync_in_progress:0")
			}
			// Every node knows every replica as one, so that a client sees
			// them wherever it asks.
			ok = ok && replicasKnown(n.cl.ClusterNodes(ctx).Val()) == len(nodes)-len(c.Nodes)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testserver: cluster not ok after %v", readyTimeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// replicasKnown counts the replicas in a CLUSTER NODES reply.
func replicasKnown(nodes string) int {
	n := 0
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && slices.Contains(strings.Split(f[2], ","), "slave") {
			n++
		}
	}
	return n
}

// Sentinel is a redis-server in sentinel mode monitoring one master.
type Sentinel struct {
	*Redis
	MasterName string
}

// StartSentinel starts a sentinel monitoring master under the name "dlockmaster"
// (quorum 1) and waits until it reports the master. It is stopped by t.Cleanup.
func StartSentinel(t testing.TB, master *Redis) *Sentinel {
	t.Helper()
	return startSentinel(t, master, 1, 1000)
}

// StartSentinels starts n sentinels monitoring master under the name
// "dlockmaster" with quorum n/2+1, each declaring the master down after 500ms
// without an answer, so that a failover to its replica follows a kill within
// seconds. They are stopped by t.Cleanup.
func StartSentinels(t testing.TB, master *Redis, n int) []*Sentinel {
	t.Helper()
	return StartSentinelsDownAfter(t, master, n, 500*time.Millisecond)
}

// StartSentinelsDownAfter is StartSentinels with the time after which a silent master
// is down (down-after-milliseconds): a longer one keeps a loaded machine's
// slow replies from starting failovers of their own.
func StartSentinelsDownAfter(t testing.TB, master *Redis, n int, downAfter time.Duration) []*Sentinel {
	t.Helper()
	out := make([]*Sentinel, n)
	for i := range out {
		out[i] = startSentinel(t, master, n/2+1, int(downAfter.Milliseconds()))
	}
	return out
}

func startSentinel(t testing.TB, master *Redis, quorum, downAfterMS int) *Sentinel {
	t.Helper()
	const name = "dlockmaster"
	dir := t.TempDir()
	var lastErr error
	for try := 0; try < 5; try++ {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 10000\n",
			port, dir, name, master.Port, quorum, name, downAfterMS, name)
		if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		r := &Redis{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, dir: dir,
			args: []string{conf, "--sentinel"}}
		if lastErr = r.Start(); lastErr != nil {
			continue
		}
		t.Cleanup(r.Stop)
		s := &Sentinel{Redis: r, MasterName: name}
		sc := redis.NewSentinelClient(&redis.Options{Addr: r.Addr})
		defer sc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
		defer cancel()
		for {
			addr, err := sc.GetMasterAddrByName(ctx, name).Result()
			if err == nil && len(addr) == 2 && addr[1] == strconv.Itoa(master.Port) {
				return s
			}
			select {
			case <-ctx.Done():
				t.Fatalf("testserver: sentinel on %s does not report master %s: %v", r.Addr, master.Addr, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	t.Fatal(lastErr)
	return nil
}
