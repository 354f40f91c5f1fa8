package verify

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/headless"
)

// timelineHistory is two holders of "k" at once (an exclusion violation),
// worker 1 delayed by a network fault meanwhile, a renewal, a force-unlock
// and a Done, and one holding of a key whose name a page must escape.
func timelineHistory() []Event {
	odd := `o"dd<b>/k`
	delay := []Event{{T: ms(20), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultDelay, Target: 1}, {T: ms(150), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultDelay, Target: 1}}
	renew := []Event{{T: ms(130), Proc: 0, Op: OpExtend, Key: "k", Token: 10, Deadline: ms(530)}}
	force := []Event{{T: ms(240), Proc: -1, Op: OpNemesis, Type: Invoke, Fault: FaultForce, Target: -1}, {T: ms(245), Proc: -1, Op: OpNemesis, Type: OK, Fault: FaultForce, Target: -1, Key: "k", Token: 11}}
	done := []Event{{T: ms(248), Proc: 1, Op: OpDone, Key: "k", Token: 11}}
	other := []Event{
		{T: ms(300), Proc: 2, Op: OpAcquire, Type: Invoke, ID: 1, Key: odd, Mode: "wait"},
		{T: ms(320), Proc: 2, Op: OpAcquire, Type: OK, ID: 1, Key: odd, Mode: "wait", Token: 3, Deadline: ms(700)},
	}
	return cat(grantEvents(0, 1, 0, 10, 400), grantEvents(1, 1, 100, 11, 400), renew, delay, force, done, releaseEvents(0, 2, 200), other)
}

// TestTimelinePagesInChromium draws the pages of a history with a violation
// and checks, in the DOM Chromium builds from them, a holding per grant on
// the rows of its worker, the fault band, the force and the renewal, and the
// violation marked on the events it names, with its message; the key whose
// name holds markup gets a page of a safe file name that shows it as text.
func TestTimelinePagesInChromium(t *testing.T) {
	headless.Chromium(t)
	h := timelineHistory()
	a := Analyze(h, checkParams)
	vs := a.Check()
	if len(vs) == 0 || vs[0].Checker == "" {
		t.Fatalf("the history holds no violation: %+v", vs)
	}
	dir := t.TempDir()
	pages, err := a.Timelines(dir, vs)
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) != 2 || pages["k"] != filepath.Join(dir, "timeline-k.html") || pages[`o"dd<b>/k`] != filepath.Join(dir, "timeline-o_dd_b__k.html") {
		t.Fatalf("pages %v", pages)
	}
	dom := headless.DumpDOM(t, "file://"+pages["k"], time.Second)
	count := func(re string) int { return len(regexp.MustCompile(re).FindAllString(dom, -1)) }
	if n := count(`<rect class="hold"`); n != 2 {
		t.Errorf("%d holdings drawn, want 2\n%s", n, dom)
	}
	if n := count(`<rect class="fault delay"`); n != 1 {
		t.Errorf("%d delay bands, want 1", n)
	}
	for _, c := range []string{"force", "renewal", "done", "deadline"} {
		if count(`<line class="`+c+`"`) == 0 {
			t.Errorf("no %s mark", c)
		}
	}
	if count(`<line class="violation"`) == 0 {
		t.Errorf("the violation's events are not marked\n%s", dom)
	}
	if !strings.Contains(dom, `<li data-checker="exclusion">`) {
		t.Errorf("the exclusion violation is not listed\n%s", dom)
	}
	if !strings.Contains(dom, "worker 0") || !strings.Contains(dom, "worker 1") || strings.Contains(dom, "worker 2<") {
		t.Errorf("the rows are not the key's workers\n%s", dom)
	}

	odd := headless.DumpDOM(t, "file://"+pages[`o"dd<b>/k`], time.Second)
	if strings.Contains(odd, "<b>/k") || !strings.Contains(odd, "o\"dd&lt;b&gt;/k") {
		t.Errorf("the key's name is not shown as text:\n%s", odd)
	}
	if !strings.Contains(odd, "No violation on this key.") {
		t.Errorf("the other key's page marks a violation:\n%s", odd)
	}
}

// TestReportLinksTheTimelines checks that a failed run's report names the
// page of the key a violation is about.
func TestReportLinksTheTimelines(t *testing.T) {
	h := timelineHistory()
	a := Analyze(h, checkParams)
	r := &Result{History: h, Violations: a.Check(), an: a}
	rec := &reportRecorder{TB: t}
	r.Report(rec, 7)
	log := strings.Join(rec.errs, "\n")
	m := regexp.MustCompile(`timeline of k: file://(\S+)`).FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no link to k's timeline in the report:\n%s", log)
	}
	if _, err := os.Stat(m[1]); err != nil {
		t.Fatalf("the linked page: %v", err)
	}
	dir := filepath.Dir(m[1])
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove(strings.TrimSuffix(dir, "-timelines") + ".jsonl")
	})
	if strings.Contains(log, "timeline of o") {
		t.Errorf("the report links a key no violation is about:\n%s", log)
	}
}

// reportRecorder keeps what Report says without failing the test.
type reportRecorder struct {
	testing.TB
	errs []string
}

func (r *reportRecorder) Helper() {}

func (r *reportRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, strings.TrimSpace(fmt.Sprintf(format, args...)))
}

func (r *reportRecorder) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }
