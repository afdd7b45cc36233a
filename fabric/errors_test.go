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
