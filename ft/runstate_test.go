//go:build linux

package ft

import (
	"testing"

	"github.com/rivet-hpc/rivet/fabric"
)

// TestRunstate: the detector's rules see each of fabric's words on a
// heartbeat thread as the same word.
func TestRunstate(t *testing.T) {
	for r := fabric.RunUnknown; r <= fabric.RunGone; r++ {
		if got := runstate(r).String(); got != r.String() {
			t.Errorf("fabric's %q reaches the rules as %q", r, got)
		}
	}
}
