//go:build linux

package ft

import "errors"

// ErrSuspected is the cause of a failure the detector declared: a
// heartbeat that stopped. Operations involving the process fail with a
// fabric.PeerError that matches both fabric.ErrProcFailed and it.
var ErrSuspected = errors.New("ft: suspected by the failure detector")
