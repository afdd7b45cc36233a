//go:build linux

package launch

import (
	"bytes"
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process that SIGKILL does not end (one stuck in the kernel, played
// here by withholding the signal) must not hang the job: Run gives up on
// it killWait after the kill and says so.
func TestRunGivesUpOnUnkillable(t *testing.T) {
	oldSignal, oldWait := signalGroup, killWait
	var withheld []int
	signalGroup = func(pgid int, sig syscall.Signal) error {
		if sig == syscall.SIGKILL {
			withheld = append(withheld, pgid)
			return nil
		}
		return oldSignal(pgid, sig)
	}
	killWait = 500 * time.Millisecond
	defer func() {
		signalGroup, killWait = oldSignal, oldWait
		for _, p := range withheld {
			syscall.Kill(-p, syscall.SIGKILL)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out, errb bytes.Buffer
	start := time.Now()
	st := Run(ctx, Options{N: 2, Stdout: &out, Stderr: &errb}, []string{"sleep", "60"})
	took := time.Since(start)
	if st != 128+int(syscall.SIGKILL) {
		t.Errorf("status %d, want %d", st, 128+int(syscall.SIGKILL))
	}
	if took > 10*time.Second {
		t.Errorf("Run took %v to give up", took)
	}
	for _, r := range []string{"rank 0 has not exited", "rank 1 has not exited"} {
		if !strings.Contains(errb.String(), r) {
			t.Errorf("stderr lacks %q:\n%s", r, errb.String())
		}
	}
	if len(withheld) == 0 {
		t.Error("no SIGKILL was sent")
	}
}
