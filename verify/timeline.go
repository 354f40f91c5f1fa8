package verify

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Timelines writes a page per key of the history into dir, named
// timeline-KEY.html (the key's characters outside [A-Za-z0-9_-] as '_'), and
// returns their paths by key. A page draws on one time line, a row per
// worker, each holding of the key: its wait (from the acquisition's
// invocation), its validity window (to the first of its release, Done, local
// deadline and the holder's death), its renewals, deadline, Done and
// release; above the rows the faults of the run (a band each, over the rows
// of the workers it hit) and the key's force-unlocks; and the events of each
// violation given, in red, with its message. Every mark has the history line
// it comes from as its tooltip. The pages need no script and no network.
func (a *Analysis) Timelines(dir string, vs []Violation) (map[string]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range a.grants {
			if !yield(k) {
				return
			}
		}
	})
	for _, v := range vs { // a violation's key with no grant gets a page too
		for _, l := range v.Lines {
			if l >= 0 && l < len(a.H) && a.H[l].Key != "" && a.grants[a.H[l].Key] == nil && !slices.Contains(keys, a.H[l].Key) {
				keys = append(keys, a.H[l].Key)
			}
		}
	}
	out := map[string]string{}
	for _, k := range keys {
		path := filepath.Join(dir, "timeline-"+fileSafe(k)+".html")
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		err = timelineTmpl.Execute(f, a.timeline(k, vs))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("verify: the timeline of %s: %w", k, err)
		}
		out[k] = path
	}
	return out, nil
}

// fileSafe is s with every character outside [A-Za-z0-9_-] replaced by '_'.
func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// Drawing constants of a timeline: pixels per millisecond (more for a
// history too short to fill tlMinPix, fewer for one that would pass
// tlMaxPix), a row's height, the margin left of the rows (their labels),
// above them (the axis and the force marks).
const (
	tlScale  = 0.1
	tlRow    = 22
	tlLeft   = 90
	tlTop    = 40
	tlMaxPix = 40000
	tlMinPix = 1000
)

// tlPage is what the template draws.
type tlPage struct {
	Key        string
	Width      int
	Height     int
	Rows       []tlLabel
	Ticks      []tlTick
	Faults     []tlMark
	Holds      []tlMark
	Marks      []tlMark
	Violations []Violation
	Span       string
}

type tlLabel struct {
	Y    int
	Text string
}

type tlTick struct {
	X    float64
	Text string
}

// tlMark is a rectangle (W > 0) or a point mark (W == 0) with its class and
// tooltip.
type tlMark struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// timeline lays out key's page.
func (a *Analysis) timeline(key string, vs []Violation) tlPage {
	p := tlPage{Key: key}
	if len(a.H) == 0 {
		return p
	}
	t0, t1 := a.H[0].T, a.H[len(a.H)-1].T
	span := max(float64(t1-t0)/1e6, 1) // milliseconds
	scale := tlScale
	switch {
	case span*scale > tlMaxPix:
		scale = tlMaxPix / span
	case span*scale < tlMinPix:
		scale = tlMinPix / span
	}
	x := func(t int64) float64 {
		t = min(max(t, t0), t1)
		return tlLeft + float64(t-t0)/1e6*scale
	}
	line := func(l int) string {
		if l < 0 || l >= len(a.H) {
			return ""
		}
		b, _ := json.Marshal(a.H[l])
		return fmt.Sprintf("line %d: %s", l, b)
	}
	// A row per worker that acted on the key or was hit by a fault.
	procs := map[int]bool{}
	for _, e := range a.H {
		if e.Key == key && e.Proc >= 0 {
			procs[e.Proc] = true
		}
	}
	order := slices.Sorted(func(yield func(int) bool) {
		for p := range procs {
			if !yield(p) {
				return
			}
		}
	})
	row := map[int]int{}
	for i, pr := range order {
		row[pr] = i
		p.Rows = append(p.Rows, tlLabel{Y: tlTop + i*tlRow + tlRow/2 + 4, Text: fmt.Sprintf("worker %d", pr)})
	}
	y := func(pr int) float64 { return float64(tlTop + row[pr]*tlRow) }
	rowsH := float64(max(1, len(order)) * tlRow)
	p.Width = int(x(t1)) + 20
	p.Height = tlTop + int(rowsH) + 20
	p.Span = time.Duration(t1 - t0).Round(time.Millisecond).String()
	step := time.Second
	if span < 5000 {
		step = 100 * time.Millisecond
	}
	for s := time.Duration(0); t0+int64(s) <= t1; s += step {
		p.Ticks = append(p.Ticks, tlTick{X: x(t0 + int64(s)), Text: s.String()})
	}
	for _, f := range a.faults {
		end := f.end
		if end == math.MaxInt64 {
			end = t1
		}
		fy, fh := float64(tlTop), rowsH
		if _, ok := row[f.target]; ok && f.target >= 0 {
			fy, fh = y(f.target), tlRow
		}
		p.Faults = append(p.Faults, tlMark{X: x(f.start), Y: fy, W: max(x(end)-x(f.start), 1.5), H: fh, Class: "fault " + fileSafe(f.name),
			Title: fmt.Sprintf("%s on %s for %v; %s", f.name, faultTarget(f.target), time.Duration(end-f.start).Round(time.Millisecond), line(f.line))})
	}
	for _, fo := range a.forces {
		if fo.ok.Key != key {
			continue
		}
		p.Marks = append(p.Marks, tlMark{X: x(fo.ok.T), Y: tlTop - 12, H: rowsH + 12, Class: "force",
			Title: fmt.Sprintf("force-unlock completed; %s", line(fo.ok.Line))})
	}
	for _, g := range a.grants[key] {
		pr := g.ok.Proc
		gy := y(pr) + 3
		p.Holds = append(p.Holds, tlMark{X: x(g.inv.T), Y: gy + 6, W: max(x(g.ok.T)-x(g.inv.T), 0), H: tlRow - 18, Class: "wait",
			Title: fmt.Sprintf("waited %v; %s", time.Duration(g.ok.T-g.inv.T).Round(time.Millisecond), line(g.inv.Line))})
		end := g.end
		if end == math.MaxInt64 {
			end = t1
		}
		cls := "hold"
		if g.read {
			cls = "hold read"
		}
		p.Holds = append(p.Holds, tlMark{X: x(g.ok.T), Y: gy, W: max(x(end)-x(g.ok.T), 1), H: tlRow - 6, Class: cls,
			Title: fmt.Sprintf("token %d held %v; %s", g.ok.Token, time.Duration(end-g.ok.T).Round(time.Millisecond), line(g.ok.Line))})
		if g.deadline != 0 {
			p.Marks = append(p.Marks, tlMark{X: x(g.deadline), Y: gy - 2, H: tlRow - 2, Class: "deadline",
				Title: fmt.Sprintf("token %d: its last local deadline", g.ok.Token)})
		}
		for _, r := range g.renewals {
			p.Marks = append(p.Marks, tlMark{X: x(r.t), Y: gy, H: tlRow - 6, Class: "renewal",
				Title: fmt.Sprintf("token %d renewed to %v", g.ok.Token, time.Duration(r.deadline-r.t).Round(time.Millisecond))})
		}
		if g.done != 0 {
			p.Marks = append(p.Marks, tlMark{X: x(g.done), Y: gy, H: tlRow - 6, Class: "done", Title: "Done; " + line(g.doneLine)})
		}
		if g.death != 0 {
			p.Marks = append(p.Marks, tlMark{X: x(g.death), Y: gy, H: tlRow - 6, Class: "death",
				Title: fmt.Sprintf("worker %d's process ended", pr)})
		}
	}
	for _, v := range vs {
		on := false
		for _, l := range v.Lines {
			if l < 0 || l >= len(a.H) {
				continue
			}
			e := a.H[l]
			if e.Key != key && e.Key != "" {
				continue
			}
			on = true
			my := float64(tlTop - 12)
			if _, ok := row[e.Proc]; ok && e.Proc >= 0 {
				my = y(e.Proc)
			}
			p.Marks = append(p.Marks, tlMark{X: x(e.T), Y: my - 2, H: tlRow + 2, Class: "violation", Title: v.Checker + ": " + line(l)})
		}
		if on || len(v.Lines) == 0 {
			p.Violations = append(p.Violations, v)
		}
	}
	return p
}

// faultTarget names a fault's target.
func faultTarget(t int) string {
	if t < 0 {
		return "the store"
	}
	return fmt.Sprintf("worker %d", t)
}

var timelineTmpl = template.Must(template.New("timeline").Funcs(template.FuncMap{"add": func(a, b float64) float64 { return a + b }}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>dlock verify: {{.Key}}</title>
<style>
body{font:13px system-ui,sans-serif;margin:12px;color:#222}
h1{font-size:16px} .legend span{margin-right:14px}
.hold{fill:#4a7bd0}.hold.read{fill:#7fb3e8}.wait{fill:#d6dde8}
.fault{fill:#f3b340;fill-opacity:.28}.fault.force{fill:#a050c0}
.deadline{stroke:#123;stroke-width:1}.renewal{stroke:#2a9d4a;stroke-width:1.5}
.done{stroke:#e07b00;stroke-width:2}.death{stroke:#111;stroke-width:2;stroke-dasharray:3 2}
.force{stroke:#a050c0;stroke-width:2;stroke-dasharray:4 3}
.violation{stroke:#d01010;stroke-width:3}
.axis{fill:#555;font-size:11px}.tick{stroke:#ddd}
ul.violations li{color:#b00000;margin-bottom:6px}
</style></head>
<body>
<h1>key {{.Key}}: {{len .Rows}} workers, {{.Span}}</h1>
<p class="legend"><span style="color:#4a7bd0">■ holding (validity window)</span><span style="color:#7fb3e8">■ read side</span><span style="color:#aab">■ waiting</span><span style="color:#f3b340">■ fault</span><span style="color:#a050c0">┆ force-unlock</span><span style="color:#2a9d4a">| renewal</span><span>| last deadline</span><span style="color:#e07b00">| Done</span><span>┆ process ended</span><span style="color:#d01010">| violation</span></p>
{{if .Violations}}<ul class="violations">{{range .Violations}}<li data-checker="{{.Checker}}"><b>{{.Checker}}</b>: {{.Msg}} (lines {{range .Lines}}{{.}} {{end}})</li>{{end}}</ul>{{else}}<p class="ok">No violation on this key.</p>{{end}}
<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}">
{{range .Ticks}}<line class="tick" x1="{{.X}}" x2="{{.X}}" y1="14" y2="{{$.Height}}"/><text class="axis" x="{{.X}}" y="12">{{.Text}}</text>
{{end}}{{range .Rows}}<text class="axis" x="4" y="{{.Y}}">{{.Text}}</text>
{{end}}{{range .Faults}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Holds}}<rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Title}}</title></rect>
{{end}}{{range .Marks}}<line class="{{.Class}}" x1="{{.X}}" x2="{{.X}}" y1="{{.Y}}" y2="{{add .Y .H}}"><title>{{.Title}}</title></line>
{{end}}</svg>
</body></html>
`))
