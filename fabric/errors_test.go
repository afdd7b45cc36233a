//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"testing"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/verbs"
)

// An error from a lower layer matches fabric's sentinel of the same
// meaning: they are one value, not two.
func TestSentinelsShared(t *testing.T) {
	for _, c := range []struct {
		err, want error
	}{
		{fmt.Errorf("verbs: bad: %w", verbs.ErrInvalid), ErrInvalid},
		{fmt.Errorf("hw: no device: %w", hw.ErrNotFound), ErrNotFound},
		{fmt.Errorf("verbs: %w", verbs.ErrNotSupported), ErrNotSupported},
		{ErrRank, verbs.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%v does not match %v", c.err, c.want)
		}
	}
}

func TestParseSources(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Source
		ok   bool
	}{
		{"all", AllSources, true}, {"none", 0, true}, {"heartbeat", SourceHeartbeat, true},
		{"pidfd, launcher", SourcePidfd | SourceLauncher, true}, {"completion,async,link", SourceCompletion | SourceAsync | SourceLink, true},
		{"heartbeats", 0, false}, {"", 0, false}, {"pidfd,", 0, false},
	} {
		got, err := ParseSources(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want || !c.ok && !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseSources(%q) = %v, %v", c.in, got, err)
		}
		if c.ok {
			if back, _ := ParseSources(got.String()); back != got && got != 0 {
				t.Errorf("%v does not read back (%v)", got, back)
			}
		}
	}
}
