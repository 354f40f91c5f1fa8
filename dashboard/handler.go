package dashboard

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/dlock-go/dlock/driver"

	"github.com/dlock-go/dlock"
)

//go:embed page.html
var pageHTML string

var page = template.Must(template.New("page").Parse(pageHTML))

// maxPlots bounds the locks whose history one JSON request asks for.
const maxPlots = 32

// Handler returns the live view of the locks of in as an http.Handler, for a
// service to mount on its admin port (under any prefix, with http.StripPrefix or
// not). It serves:
//
//	GET  .../               the page: one self-contained HTML document (no external assets)
//	GET  .../api/locks      the same data as JSON (Snapshot, with "plots" for each ?plot=KEY)
//	POST .../api/unlock     {"key": K, "owner": O}: force-unlock K if O still holds it
//
// It reads the locks when a request comes and the last read is older than the
// interval, so that it starts no goroutine and costs nothing while nobody looks;
// the page polls every interval. The unlock call is refused (403) unless
// opts.AllowUnlock is set, and always for a request from another origin. There
// is no authentication: mount it where only operators reach it. A bad
// opts.Pattern is reported by every request (500).
func Handler(in driver.Inspector, opts Options) http.Handler {
	w, err := NewWatcher(in, opts)
	if err != nil {
		return http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
			http.Error(rw, Printable(err.Error()), http.StatusInternalServerError)
		})
	}
	return w.Handler()
}

// Handler returns the Watcher's view as an http.Handler (see the function
// Handler): several handlers of one Watcher share its reads.
func (w *Watcher) Handler() http.Handler { return &handler{w: w} }

type handler struct{ w *Watcher }

func (h *handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.Header().Set("Cache-Control", "no-store")
	switch p := r.URL.Path; {
	case strings.HasSuffix(p, "/api/locks") || p == "api/locks":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		h.locks(rw, r)
	case strings.HasSuffix(p, "/api/unlock") || p == "api/unlock":
		h.unlock(rw, r)
	case strings.Contains(p, "/api/"):
		http.NotFound(rw, r)
	default:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			rw.Header().Set("Allow", "GET, HEAD")
			http.Error(rw, "GET only", http.StatusMethodNotAllowed)
			return
		}
		h.page(rw)
	}
}

// page serves the HTML document.
func (h *handler) page(rw http.ResponseWriter) {
	o := h.w.opts
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	// The page's own script and style only: holder text can never run.
	rw.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	rw.Header().Set("X-Frame-Options", "DENY")
	_ = page.Execute(rw, struct {
		Title, Pattern string
		IntervalMS     int64
		AllowUnlock    bool
	}{Printable(o.Title), Printable(o.Pattern), o.Interval.Milliseconds(), o.AllowUnlock})
}

// locksReply is the JSON of GET api/locks.
type locksReply struct {
	Snapshot
	Title       string             `json:"title,omitempty"`
	IntervalMS  int64              `json:"interval_ms"`
	TookMS      float64            `json:"took_ms"`
	AllowUnlock bool               `json:"allow_unlock"`
	Plots       map[string][]Point `json:"plots,omitempty"`
}

func (h *handler) locks(rw http.ResponseWriter, r *http.Request) {
	s := h.w.refreshIfOld(r.Context())
	reply := locksReply{Snapshot: s, Title: Printable(h.w.opts.Title), IntervalMS: s.Interval.Milliseconds(),
		TookMS: float64(s.Took.Microseconds()) / 1000, AllowUnlock: h.w.opts.AllowUnlock}
	if keys := r.URL.Query()["plot"]; len(keys) > 0 {
		reply.Plots = map[string][]Point{}
		for _, k := range keys[:min(len(keys), maxPlots)] {
			if p := h.w.History(k); p != nil {
				reply.Plots[Printable(k)] = p
			}
		}
	}
	code := http.StatusOK
	if s.Err != "" && s.Time.IsZero() {
		code = http.StatusBadGateway
	}
	writeJSON(rw, code, reply)
}

// unlockRequest is the body of POST api/unlock: the lock and the owner token
// of the holder the operator confirmed (Row.Owner).
type unlockRequest struct {
	Key   string `json:"key"`
	Owner string `json:"owner"`
}

func (h *handler) unlock(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		rw.Header().Set("Allow", "POST")
		http.Error(rw, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if !h.w.opts.AllowUnlock {
		writeError(rw, http.StatusForbidden, "force-unlock is not enabled on this view (read-only)")
		return
	}
	if why := crossOrigin(r); why != "" {
		writeError(rw, http.StatusForbidden, "refused: "+why)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		// A JSON body cannot be sent across origins without a preflight this
		// handler never approves.
		writeError(rw, http.StatusUnsupportedMediaType, "the body must be application/json")
		return
	}
	var req unlockRequest
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 4096)).Decode(&req); err != nil {
		writeError(rw, http.StatusBadRequest, "bad request body: "+Printable(err.Error()))
		return
	}
	if req.Owner == "" {
		writeError(rw, http.StatusBadRequest, "the owner to confirm is missing")
		return
	}
	removed, err := h.w.ForceUnlock(r.Context(), req.Key, req.Owner)
	switch {
	case errors.Is(err, dlock.ErrInvalid):
		writeError(rw, http.StatusBadRequest, Printable(err.Error()))
		return
	case errors.Is(err, dlock.ErrNotHeld):
		writeError(rw, http.StatusConflict, Printable(err.Error()))
		return
	case err != nil:
		writeError(rw, http.StatusBadGateway, Printable(err.Error()))
		return
	}
	if a := h.w.opts.Audit; a != nil {
		a(removed, r.RemoteAddr)
	}
	writeJSON(rw, http.StatusOK, struct {
		Removed Row `json:"removed"`
	}{removed})
}

// crossOrigin says why r comes from a page of another origin, or "".
func crossOrigin(r *http.Request) string {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return "a request from another site"
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return "a request from origin " + Printable(o)
		}
	}
	return ""
}

// ErrHolderChanged is returned (joined with dlock.ErrNotHeld) by
// Watcher.ForceUnlock when the lock is held by another owner than the one
// confirmed.
var ErrHolderChanged = errors.New("the lock changed hands")

// ForceUnlock removes the lock named key if owner (a Row.Owner the operator
// confirmed) still holds it, and returns what it removed. The error matches
// dlock.ErrNotHeld when the lock is free, and also ErrHolderChanged when
// another owner holds it now (nothing is removed then). The holder is told as
// for Inspector.ForceUnlock (at once where the backend pushes it, otherwise at
// its next renewal). The Handler calls it only with
// Options.AllowUnlock; a Watcher used directly (a terminal view) must ask its
// operator first.
func (w *Watcher) ForceUnlock(ctx context.Context, key, owner string) (Row, error) {
	ctx, cancel := context.WithTimeout(ctx, max(5*time.Second, 10*w.opts.Interval))
	defer cancel()
	info, err := w.in.Inspect(ctx, key)
	if err != nil {
		return Row{}, err
	}
	now := w.now()
	if !info.Held {
		return Row{}, fmt.Errorf("%w: %q is free now", dlock.ErrNotHeld, Printable(key))
	}
	if Printable(info.Owner) != owner {
		return describe(info, now), fmt.Errorf("%w: %w: %q is held by %s now, not by the holder confirmed; nothing removed",
			dlock.ErrNotHeld, ErrHolderChanged, Printable(key), holderLine(describe(info, now)))
	}
	removed, err := w.in.ForceUnlock(ctx, key)
	if err != nil {
		return Row{}, err
	}
	row := describe(removed, now)
	if removed.Owner != info.Owner {
		return row, fmt.Errorf("%w: %q changed hands while being removed: removed %s", ErrHolderChanged, Printable(key), row.Holder)
	}
	return row, nil
}

// describe is the row of one LockInfo read at now, with no history.
func describe(info dlock.LockInfo, now time.Time) Row {
	tr := &track{}
	tr.observe(info, now)
	return tr.row(info.Key, now)
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json; charset=utf-8")
	rw.WriteHeader(code)
	enc := json.NewEncoder(rw)
	_ = enc.Encode(v) // a client gone is not worth reporting
}

func writeError(rw http.ResponseWriter, code int, msg string) {
	writeJSON(rw, code, struct {
		Error string `json:"error"`
	}{msg})
}
