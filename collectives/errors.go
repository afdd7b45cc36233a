//go:build linux

package collectives

import (
	"fmt"

	"github.com/rivet-hpc/rivet/fabric"
)

// Errors of collective calls; both match fabric.ErrInvalid with errors.Is.
var (
	// ErrCount is returned for counts or buffers that do not fit the call.
	ErrCount = fmt.Errorf("collectives: counts and buffers do not fit: %w", fabric.ErrInvalid)

	// ErrType is returned for element types that hold pointers: their bytes
	// mean nothing in another process.
	ErrType = fmt.Errorf("collectives: element type holds pointers: %w", fabric.ErrInvalid)
)
