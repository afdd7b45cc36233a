//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"

	"github.com/rivet-hpc/rivet/hw"
)

var (
	// ErrNotSupported is hw.ErrNotSupported: a device, driver or feature
	// this build cannot drive.
	ErrNotSupported = hw.ErrNotSupported
	// ErrClosed is returned by operations on a closed object.
	ErrClosed = os.ErrClosed
	// ErrBusy is returned when closing an object that others still use.
	ErrBusy = errors.New("still in use")
	// ErrQueueFull is returned when a post does not fit in the free slots
	// of a send or receive queue; nothing was posted.
	ErrQueueFull = errors.New("queue full")
	// ErrInvalid is wrapped by every rejected argument.
	ErrInvalid = errors.New("invalid argument")
	// ErrState is returned for an operation the queue pair's state forbids.
	ErrState = errors.New("wrong queue pair state")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("verbs: %w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Status is a work completion status (enum ibv_wc_status). A Status other
// than StatusSuccess is an error; CompletionError wraps it, so
// errors.Is(err, verbs.StatusRemAccessErr) tells what failed.
type Status uint32

// Work completion statuses.
const (
	StatusSuccess        Status = 0
	StatusLocLenErr      Status = 1
	StatusLocQPOpErr     Status = 2
	StatusLocEECOpErr    Status = 3
	StatusLocProtErr     Status = 4
	StatusWRFlushErr     Status = 5
	StatusMWBindErr      Status = 6
	StatusBadRespErr     Status = 7
	StatusLocAccessErr   Status = 8
	StatusRemInvReqErr   Status = 9
	StatusRemAccessErr   Status = 10
	StatusRemOpErr       Status = 11
	StatusRetryExcErr    Status = 12
	StatusRNRRetryExcErr Status = 13
	StatusLocRDDViolErr  Status = 14
	StatusRemInvRdReqErr Status = 15
	StatusRemAbortErr    Status = 16
	StatusInvEECNErr     Status = 17
	StatusInvEECStateErr Status = 18
	StatusFatalErr       Status = 19
	StatusRespTimeoutErr Status = 20
	StatusGeneralErr     Status = 21
)

// statusNames are ibv_wc_status_str's words.
var statusNames = [...]string{
	"success", "local length error", "local QP operation error", "local EE context operation error",
	"local protection error", "Work Request Flushed Error", "memory management operation error",
	"bad response error", "local access error", "remote invalid request error", "remote access error",
	"remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded",
	"local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number",
	"invalid EE context state", "fatal error", "response timeout error", "general error",
}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status %d", uint32(s))
}

// Error makes a Status usable as an error and as an errors.Is target.
func (s Status) Error() string { return s.String() }

// CompletionError is a failed work completion.
type CompletionError struct {
	Status    Status
	VendorErr uint32
	QPN       uint32
	WRID      uint64
	Opcode    WCOpcode
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("verbs: work request %#x on QP %#x failed: %s (status %d, vendor error %#x)",
		e.WRID, e.QPN, e.Status, uint32(e.Status), e.VendorErr)
}

// Unwrap returns the Status.
func (e *CompletionError) Unwrap() error { return e.Status }
