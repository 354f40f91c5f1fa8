// Package verify checks dlock's safety promises by search rather than by
// example: worker processes take locks on a real backend under seeded faults,
// read-modify-write a fenced resource with their tokens, and record every
// operation in a history that machine checkers then examine (fencing,
// exclusion, linearizability of the resource, told-first, liveness and
// fairness; in workloads of their own, holdings handed between processes and
// dlock.Once). The tests of this module run it on every backend and against
// deliberately broken variants, which the checkers must catch.
//
//	h, _ := verify.ReadHistory(dir) // the JSON lines the workers recorded
//	a := verify.Analyze(h, verify.Params{Kind: "mutex", TTL: ttl, Bound: time.Second})
//	for _, v := range a.Check() {
//		fmt.Println(v.Format(h)) // the checker, and the events around the violation
//	}
//
// The dlock command's "verify" runs workers against a user's own store and
// prints these checks; docs/safety.md lists what each checker promises.
package verify

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Now is the history's clock: CLOCK_MONOTONIC in nanoseconds, the same for
// every process on the host.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC exists on every Linux
	}
	return ts.Nano()
}

// Operation kinds of a history event.
const (
	OpAcquire = "acquire" // a lock acquisition (Mode says which call)
	OpRelease = "release" // Unlock (or the end of Do's function)
	OpExtend  = "extend"  // the lease's local deadline moved (a renewal)
	OpDone    = "done"    // the lease's Done fired
	OpRead    = "read"    // a read of the protected resource
	OpWrite   = "write"   // a fenced write of the protected resource
	OpNemesis = "nemesis" // a fault injected (Fault says which)
	OpStart   = "start"   // a worker process started
	// OpExit is a worker process that ended otherwise than cleanly or by
	// SIGKILL (Target: the worker, Err: its status and the end of its log),
	// recorded by the harness.
	OpExit = "worker-exit"
	// OpStored is what the lock store held of a key (Token, Owner; none: 0)
	// when the harness asked it right after a restart, recorded by the
	// harness: a holding it had granted and no longer has was lost.
	OpStored = "stored"
)

// Event types: an invocation, and its completion.
const (
	Invoke = "invoke"
	OK     = "ok"   // completed: granted, accepted, read
	Fail   = "fail" // completed without effect: busy, refused, stale
	Info   = "info" // the outcome is unknown (no reply came)
)

// Event is one line of a history.
type Event struct {
	T        int64  `json:"t"`             // Now() when it happened
	Proc     int    `json:"p"`             // worker number (-1: the test process)
	PID      int    `json:"pid,omitempty"` // its OS process
	Op       string `json:"op"`
	Type     string `json:"type,omitempty"`
	ID       int64  `json:"id,omitempty"` // pairs an invocation with its completion, within Proc
	Key      string `json:"key,omitempty"`
	Mode     string `json:"mode,omitempty"`     // try, wait, do
	Read     bool   `json:"read,omitempty"`     // an acquisition of a read-write lock's read side
	Token    uint64 `json:"token,omitempty"`    // fencing token
	Deadline int64  `json:"deadline,omitempty"` // the lease's local deadline, on Now's clock
	Value    int64  `json:"value,omitempty"`    // a resource value read or written
	Err      string `json:"err,omitempty"`
	Fault    string `json:"fault,omitempty"`
	Owner    string `json:"owner,omitempty"`  // a force's: the owner of the holding it removed; a grant's: its owner
	Target   int    `json:"target,omitempty"` // the worker a fault hit (-1: a server)
	// Nodes are the servers a network fault hit, by their order in the
	// workers' list of addresses (none: every one).
	Nodes      []int         `json:"nodes,omitempty"`
	Delay      time.Duration `json:"delay,omitempty"`       // a delay fault's, of requests
	ReplyDelay time.Duration `json:"reply_delay,omitempty"` // a delay fault's, of replies
	// Cut is a reset's, on its completion: how many open connections
	// between the workers and the store it cut; a crash's of a store
	// that records them, and of a termination of the store's client
	// connections: how many of them its servers closed; an etcd
	// partition's: how many chunks of the workers' traffic with the cut
	// member it held.
	Cut  int `json:"cut,omitempty"`
	Line int `json:"-"` // position in the merged history
}

// String is the event as a history line, after its position.
func (e Event) String() string {
	b, _ := json.Marshal(e)
	return fmt.Sprintf("%5d %s", e.Line, b)
}

// Recorder appends events to a JSON-lines file. It is safe for concurrent use.
// Each line is written with one write call, so a process killed mid-run leaves
// whole lines.
type Recorder struct {
	mu   sync.Mutex
	f    *os.File
	proc int
	pid  int
	seq  int64
}

// NewRecorder opens (appends to) the history file path for worker proc.
func NewRecorder(path string, proc int) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, proc: proc, pid: os.Getpid()}, nil
}

// NextID returns a new operation id.
func (r *Recorder) NextID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	return r.seq
}

// Record writes e, stamped with the time (when e.T is 0), the worker and its PID.
func (r *Recorder) Record(e Event) {
	if e.T == 0 {
		e.T = Now()
	}
	e.Proc, e.PID = r.proc, r.pid
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.f.Write(b)
}

// Close closes the file.
func (r *Recorder) Close() error { return r.f.Close() }

// ReadHistory reads every *.jsonl file in dir and returns their events in time
// order, each with its Line.
func ReadHistory(dir string) ([]Event, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	var h []Event
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			var e Event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				h = append(h, e)
			}
		}
		f.Close()
	}
	sort.SliceStable(h, func(i, j int) bool { return h[i].T < h[j].T })
	for i := range h {
		h[i].Line = i
	}
	return h, nil
}

// WriteHistory writes h as JSON lines to path (the merged history kept with a
// failing run).
func WriteHistory(path string, h []Event) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, e := range h {
		b, _ := json.Marshal(e)
		w.Write(b)
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
