//go:build linux

package progress

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestTerminal: on a terminal the line is drawn, redrawn no more than
// every tenth of a second, and cleared at the end.
func TestTerminal(t *testing.T) {
	t.Setenv("TERM", "xterm")
	term, reader := testutil.Pty(t)
	if !IsTerminal(term) {
		t.Fatal("a pseudo-terminal is not a terminal")
	}
	l := New(term, "osu_latency")
	l.Step(1, 3, "1 bytes")
	l.Step(2, 3, "2 bytes") // (too soon: not drawn)
	time.Sleep(every + 10*time.Millisecond)
	l.Step(3, 3, "4 bytes")
	l.Done()
	term.Close()
	var got bytes.Buffer
	io.Copy(&got, reader) // (ends with EIO once the terminal side is closed)
	want := regexp.MustCompile(`^\r\x1b\[Kosu_latency: 1 bytes \(1 of 3\), \d+\.\d s\r\x1b\[Kosu_latency: 4 bytes \(3 of 3\), \d+\.\d s\r\x1b\[K$`)
	if s := got.String(); !want.MatchString(s) {
		t.Errorf("the terminal got %q", s)
	}
}

// TestPipe: in a pipe (or a file), or on a terminal whose TERM is dumb
// or unset, nothing at all is written.
func TestPipe(t *testing.T) {
	for _, term := range []string{"dumb", ""} {
		t.Setenv("TERM", term)
		tty, _ := testutil.Pty(t)
		if IsTerminal(tty) {
			t.Errorf("TERM=%q: a terminal to show progress on", term)
		}
	}
	t.Setenv("TERM", "xterm")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if IsTerminal(w) {
		t.Fatal("a pipe is a terminal")
	}
	l := New(w, "osu_latency")
	l.Step(1, 1, "1 bytes")
	l.Done()
	w.Close()
	if b, _ := io.ReadAll(r); len(b) != 0 {
		t.Errorf("the pipe got %q", b)
	}
	var buf bytes.Buffer
	New(&buf, "x").Step(1, 1, "y")
	if buf.Len() != 0 {
		t.Errorf("a buffer got %q", buf.String())
	}
}
