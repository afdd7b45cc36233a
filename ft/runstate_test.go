//go:build linux

package ft

import (
	"testing"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// TestRunstate: the detector's rules take each of fabric's words on a
// heartbeat thread as the same word (the two lists have the same values,
// which runstate and fabric's String rely on).
func TestRunstate(t *testing.T) {
	for _, tc := range []struct {
		f fabric.Runstate
		u ulfm.Runstate
	}{
		{fabric.RunUnknown, ulfm.RunUnknown},
		{fabric.RunWaiting, ulfm.RunWaiting},
		{fabric.RunAsleep, ulfm.RunAsleep},
		{fabric.RunFrozen, ulfm.RunFrozen},
		{fabric.RunStopped, ulfm.RunStopped},
		{fabric.RunGone, ulfm.RunGone},
	} {
		if got := runstate(tc.f); got != tc.u {
			t.Errorf("fabric's %d reaches the rules as %v, want %v", int(tc.f), got, tc.u)
		}
	}
}
