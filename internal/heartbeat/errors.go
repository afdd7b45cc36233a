//go:build linux

package heartbeat

import "errors"

// ErrStopped is returned by Stop for a heartbeat already stopped.
var ErrStopped = errors.New("heartbeat: already stopped")
