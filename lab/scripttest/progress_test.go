// Package scripttest tests the lab scripts' shared shell functions.
package scripttest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/rivet-hpc/rivet/internal/testutil"
)

// TestProgress: the lab scripts' progress line (progress.sh) shows on a
// terminal and is absent from a pipe.
func TestProgress(t *testing.T) {
	script := `. ../progress.sh; progress "x: round 1 of 2"; progress "x: round 2 of 2"; progress_done; echo out`
	term, reader := testutil.Pty(t)
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, term
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	term.Close()
	var got bytes.Buffer
	io.Copy(&got, reader)
	if !regexp.MustCompile(`^\r\x1b\[Kx: round 1 of 2, \d+ s\r\x1b\[Kx: round 2 of 2, \d+ s\r\x1b\[K$`).Match(got.Bytes()) || stdout.String() != "out\n" {
		t.Errorf("on a terminal: stderr %q, stdout %q", got.String(), stdout.String())
	}

	cmd = exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=xterm")
	var errb bytes.Buffer
	stdout.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &errb
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if errb.Len() != 0 || stdout.String() != "out\n" {
		t.Errorf("in a pipe: stderr %q, stdout %q", errb.String(), stdout.String())
	}

	// A terminal whose TERM is dumb (rxevm's, when it captures a VM's
	// output) gets nothing either.
	term, reader = testutil.Pty(t)
	cmd = exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "TERM=dumb")
	stdout.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, term
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	term.Close()
	got.Reset()
	io.Copy(&got, reader)
	if got.Len() != 0 {
		t.Errorf("TERM=dumb: stderr %q", got.String())
	}
}
