//go:build linux

// Package progress shows where long work is — "osu_latency: 4096 bytes
// (12 of 23), 3.1 s" — on one line of a terminal, rewritten as the work
// moves. On anything else (a pipe, a file, or a terminal whose TERM is
// unset or "dumb", as rxevm sets it in a VM whose output it captures) it
// writes nothing, so captured output is the same with or without it.
package progress

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// every is the least time between two redraws.
const every = 100 * time.Millisecond

// Line is one piece of work's progress line.
type Line struct {
	w     io.Writer // nil: not a terminal, nothing shown
	what  string
	start time.Time
	last  time.Time
	shown bool
}

// New returns the progress line of work named what on w, which shows
// only when w is a terminal.
func New(w io.Writer, what string) *Line {
	l := &Line{what: what, start: time.Now()}
	if IsTerminal(w) {
		l.w = w
	}
	return l
}

// IsTerminal reports whether w is a terminal someone watches: a
// terminal device, with TERM set and not "dumb".
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if t := os.Getenv("TERM"); !ok || t == "" || t == "dumb" {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Step says the work is at step i (from 1) of n, doing detail. Steps
// closer together than a tenth of a second are not drawn, except the
// first.
func (l *Line) Step(i, n int, detail string) {
	if l == nil || l.w == nil {
		return
	}
	now := time.Now()
	if l.shown && now.Sub(l.last) < every {
		return
	}
	l.last, l.shown = now, true
	fmt.Fprintf(l.w, "\r\033[K%s: %s (%d of %d), %.1f s", l.what, detail, i, n, now.Sub(l.start).Seconds())
}

// Done clears the line, leaving the terminal as it was.
func (l *Line) Done() {
	if l == nil || l.w == nil || !l.shown {
		return
	}
	fmt.Fprint(l.w, "\r\033[K")
	l.shown = false
}
