//go:build linux

package fabric

import (
	"fmt"

	"github.com/rivet-hpc/rivet/internal/sysmon"
)

// tuneMonitor applies WithProcessTuning's choice for the Go runtime's
// monitor thread (RIVET_SYSMON, "auto" by default).
func (o *options) tuneMonitor() error {
	if !o.tune {
		return nil
	}
	if err := sysmon.Apply(o.sysmon); err != nil {
		return fmt.Errorf("fabric: process tuning: %w", err)
	}
	return nil
}
