package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlock-go/dlock/dashboard"
)

// topColumn is one column of the table.
type topColumn struct {
	title string
	width int  // the width, or the least for the key and the holder
	right bool // aligned right
	cell  func(r dashboard.Row, width int) string
}

// topColumns returns the columns that fit width, the less needed ones left
// out first on narrow terminals, and the key and holder widened for rows.
func topColumns(width int, rows []dashboard.Row) []topColumn {
	kindW, barW := 5, 0 // narrow: the TTL without its bar
	switch {
	case width >= 120:
		kindW, barW = 11, 10
	case width >= 70:
		barW = 6
	}
	all := []struct {
		c    topColumn
		prio int // lower goes first
	}{
		{topColumn{title: "", width: 2, cell: func(r dashboard.Row, _ int) string { return marks(r) }}, 9},
		{topColumn{title: "KEY", width: 10, cell: func(r dashboard.Row, _ int) string { return r.Key }}, 9},
		{topColumn{title: "KIND", width: kindW, cell: func(r dashboard.Row, w int) string { return kindText(r.Kind, w) }}, 2},
		{topColumn{title: "HOLDER", width: 12, cell: func(r dashboard.Row, _ int) string { return r.Holder }}, 8},
		{topColumn{title: "HELD", width: 6, right: true, cell: func(r dashboard.Row, _ int) string { return heldText(r) }}, 4},
		{topColumn{title: "TTL", width: max(barW+6, 5), cell: func(r dashboard.Row, w int) string { return ttlCell(r, w-6) }}, 5},
		{topColumn{title: "WAIT", width: 4, right: true, cell: func(r dashboard.Row, _ int) string { return waitersText(r.Waiters) }}, 7},
		{topColumn{title: "HOLDERS", width: 8, right: true, cell: func(r dashboard.Row, _ int) string { return holdersText(r.Held, r.Holders, r.Limit) }}, 3},
		{topColumn{title: "ACQ/S", width: 5, right: true, cell: func(r dashboard.Row, _ int) string { return rateText(r.Rate) }}, 1},
	}
	keep := make([]bool, len(all))
	for i := range keep {
		keep[i] = true
	}
	used := func() int {
		n := 0
		for i, c := range all {
			if keep[i] {
				n += c.c.width + 1
			}
		}
		return n - 1
	}
	for prio := 1; used() > width && prio < 9; prio++ {
		for i, c := range all {
			if c.prio == prio {
				keep[i] = false
			}
		}
	}
	var cols []topColumn
	for i, c := range all {
		if keep[i] {
			cols = append(cols, c.c)
		}
	}
	// The spare columns go to the key and the holder, as far as their text
	// needs: two fifths to the key first, then the holder, then the key.
	need := map[string]int{"KEY": 0, "HOLDER": 0}
	for _, r := range rows {
		need["KEY"] = max(need["KEY"], utf8.RuneCountInString(r.Key))
		need["HOLDER"] = max(need["HOLDER"], utf8.RuneCountInString(r.Holder))
	}
	spare := width - used()
	give := func(title string, most int) {
		for i := range cols {
			if cols[i].title == title && spare > 0 {
				add := min(max(need[title]-cols[i].width, 0), most, spare)
				cols[i].width += add
				spare -= add
			}
		}
	}
	give("KEY", spare*2/5)
	give("HOLDER", spare)
	give("KEY", spare)
	return cols
}

func marks(r dashboard.Row) string {
	m := ""
	if r.TTLLow {
		m += "!"
	}
	if r.Vanished {
		m += "?"
	}
	return m
}

func kindText(kind string, w int) string {
	if w >= len(kind) {
		return kind
	}
	switch {
	case strings.HasPrefix(kind, "semaphore "):
		return "sem" + strings.TrimPrefix(kind, "semaphore ")
	case kind == "read-write":
		return "rw"
	case kind == "exclusive":
		return "excl"
	case kind == "reentrant":
		return "reent"
	}
	return kind
}

func heldText(r dashboard.Row) string {
	if !r.Held {
		return "-"
	}
	return shortDur(r.HeldFor)
}

func rateText(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 0, 64)
}

// ttlCell is the TTL left as a bar of barW cells (none when barW < 2) and a
// duration of 5 columns.
func ttlCell(r dashboard.Row, barW int) string {
	switch {
	case !r.Held && r.DelayMS > 0:
		return "lock-delay " + shortDur(time.Duration(r.DelayMS)*time.Millisecond)
	case !r.Held:
		return "free"
	case r.TTL < 0:
		return "session"
	}
	text := fmt.Sprintf("%5s", shortDur(r.TTL))
	if barW < 2 {
		return strings.TrimSpace(text)
	}
	full := 0
	if r.TTLMax > 0 {
		full = int((int64(r.TTL)*int64(barW) + int64(r.TTLMax)/2) / int64(r.TTLMax))
	}
	full = min(max(full, 0), barW)
	if full == 0 && r.TTL > 0 {
		full = 1
	}
	return strings.Repeat("█", full) + strings.Repeat("░", barW-full) + " " + text
}

// shortDur writes d in at most 6 columns: 9.5s, 42s, 12m05s, 3h07m, 2d04h.
func shortDur(d time.Duration) string {
	s := d.Seconds()
	switch {
	case d < 0:
		return "-"
	case s < 10:
		return strconv.FormatFloat(s, 'f', 1, 64) + "s"
	case s < 60:
		return strconv.Itoa(int(s)) + "s"
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", int(s)/60, int(s)%60)
	case s < 86400:
		return fmt.Sprintf("%dh%02dm", int(s)/3600, int(s)%3600/60)
	}
	return fmt.Sprintf("%dd%02dh", int(s)/86400, int(s)%86400/3600)
}

// cell pads or cuts s to exactly w columns.
func cell(s string, w int, right bool) string {
	n := utf8.RuneCountInString(s)
	if n > w {
		if w < 2 {
			return strings.Repeat(" ", w)
		}
		return string([]rune(s)[:w-1]) + "…"
	}
	if right {
		return strings.Repeat(" ", w-n) + s
	}
	return s + strings.Repeat(" ", w-n)
}

// ttlBar finds the filled part of a TTL bar, to color it.
var ttlBar = regexp.MustCompile(`█+`)

// ANSI attributes of the table.
const (
	sgrReset   = "\x1b[0m"
	sgrReverse = "\x1b[7m"
	sgrDim     = "\x1b[2m"
	sgrBold    = "\x1b[1m"
	sgrWarn    = "\x1b[33;1m"
)

// renderTop returns the lines of the screen: a header, the table, a message
// or prompt line and the keys. Holder text in rows is already escaped
// (dashboard.Printable); every line is cut to width.
func renderTop(where string, snap dashboard.Snapshot, s *topState, width, height int, now time.Time) []string {
	width, height = max(width, 20), max(height, 5)
	rows := visibleRows(snap, s)
	sel, hasSel := selectedRow(rows, s)
	head := fmt.Sprintf("dlock top · %s · %s · %d held, %s", where, printable(snap.Pattern), snap.Held, waitingText(snap))
	if !snap.Time.IsZero() {
		head += " · " + snap.Time.Local().Format("15:04:05")
	}
	status := fmt.Sprintf("sort %s · every %v", s.sort, snap.Interval)
	if !snap.Time.IsZero() {
		status += fmt.Sprintf(" · read in %v", snap.Took.Round(100*time.Microsecond))
	}
	switch {
	case s.editing:
		status += " · filter: " + printable(s.draft) + "▏"
	case s.filter != "":
		status += fmt.Sprintf(" · filter %q (%d of %d)", s.filter, len(rows), len(snap.Rows))
	}
	lines := []string{sgrBold + cell(head, width, false) + sgrReset}
	if snap.Err != "" {
		lines = append(lines, sgrWarn+cell("read failed: "+snap.Err, width, false)+sgrReset)
	} else {
		lines = append(lines, cell(status, width, false))
	}
	cols := topColumns(width, rows)
	var hb strings.Builder
	for i, c := range cols {
		if i > 0 {
			hb.WriteByte(' ')
		}
		hb.WriteString(cell(c.title, c.width, c.right))
	}
	lines = append(lines, sgrReverse+cell(hb.String(), width, false)+sgrReset)

	var detail []string
	if s.detail && hasSel {
		detail = detailLines(sel, width)
		detail = detail[:min(len(detail), max(height-len(lines)-3, 0))] // a row of the table stays
	}
	room := max(height-len(lines)-2-len(detail), 1)
	first := 0
	for i, r := range rows { // keep the selection on the screen
		if hasSel && r.Key == sel.Key && i >= room {
			first = i - room + 1
		}
	}
	for i := first; i < len(rows) && i < first+room; i++ {
		r := rows[i]
		var b strings.Builder
		for j, c := range cols {
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(cell(c.cell(r, c.width), c.width, c.right))
		}
		line := cell(b.String(), width, false)
		color := "\x1b[32m"
		if r.TTLLow {
			color = "\x1b[33m"
		}
		line = ttlBar.ReplaceAllString(line, color+"$0\x1b[39m")
		switch {
		case hasSel && r.Key == sel.Key:
			line = sgrReverse + line + sgrReset
		case !r.Held:
			line = sgrDim + line + sgrReset
		case r.Vanished || r.TTLLow:
			line = sgrWarn + line[:len(marks(r))] + sgrReset + line[len(marks(r)):]
		}
		lines = append(lines, line)
	}
	if len(rows) == 0 {
		lines = append(lines, cell("  no held lock matches", width, false))
	}
	for len(lines) < height-2-len(detail) {
		lines = append(lines, "")
	}
	lines = append(lines, detail...)
	if c := s.confirm; c != nil {
		lines = append(lines,
			sgrWarn+cell(fmt.Sprintf("Force-unlock %q? y removes it, any other key cancels", c.Key), width, false)+sgrReset,
			sgrWarn+cell(fmt.Sprintf("held by %s (owner %s, for %s)", c.Holder, c.Owner, shortDur(c.HeldFor)), width, false)+sgrReset)
		return lines
	}
	lines = append(lines, cell(s.message, width, false))
	lines = append(lines, sgrDim+cell("q quit  ↑↓ select  Enter whole row  s sort  / filter  u force-unlock", width, false)+sgrReset)
	return lines
}

// detailLines shows row r whole, one field a line, long values wrapped to
// width: what the table's columns cut.
func detailLines(r dashboard.Row, width int) []string {
	token := "-"
	if r.Token != 0 {
		token = strconv.FormatUint(r.Token, 10)
	}
	fields := [][2]string{
		{"key", r.Key}, {"kind", r.Kind}, {"holder", r.Holder}, {"owner", r.Owner},
		{"held for", heldText(r)}, {"ttl left", ttlCell(r, 0)}, {"token", token},
		{"waiters", waitersText(r.Waiters)}, {"holders", holdersText(r.Held, r.Holders, r.Limit)}, {"acq/s", rateText(r.Rate)},
	}
	const indent = 10
	lines := []string{sgrReverse + cell(" the selected lock whole (Enter hides it)", width, false) + sgrReset}
	for _, f := range fields {
		if f[1] == "" {
			continue
		}
		v := []rune(f[1])
		room := max(width-indent, 1)
		label := fmt.Sprintf("%-*s", indent, f[0])
		for len(v) > 0 {
			n := min(len(v), room)
			lines = append(lines, label+string(v[:n]))
			v, label = v[n:], strings.Repeat(" ", indent)
		}
	}
	return lines
}
