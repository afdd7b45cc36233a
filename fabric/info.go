//go:build linux

package fabric

import "fmt"

// ErrorRange is how far a process failure reaches on a communicator
// (MPI 4.1 §16.2.1, the "mpi_error_range" info key).
type ErrorRange int

// The error ranges.
const (
	// RangeOperation: only operations that involve a failed process raise
	// ErrProcFailed (the default).
	RangeOperation ErrorRange = iota
	// RangeGroup: the failure of a member revokes the communicator, so
	// every operation on it raises ErrRevoked, even between live members.
	RangeGroup
	// RangeGlobal: the failure of any process of the job revokes it.
	RangeGlobal
)

var rangeNames = [...]string{"operation", "group", "global"}

func (r ErrorRange) String() string {
	if r >= 0 && int(r) < len(rangeNames) {
		return rangeNames[r]
	}
	return fmt.Sprintf("ErrorRange(%d)", int(r))
}

// ErrorUniform is whether errors of collective operations on a
// communicator are raised at every member alike (MPI 4.1 §16.2.3, the
// "mpi_error_uniform" info key).
type ErrorUniform int

// The error uniformities.
const (
	// UniformLocal: a collective may raise at some members and succeed
	// at others (the default).
	UniformLocal ErrorUniform = iota
	// UniformColl: every collective of package collectives raises at
	// all members or at none: each ends with an agreement, so each
	// synchronizes; a nonblocking one's request completes once the
	// agreement is decided (see Comm.UniformRequest).
	UniformColl
	// UniformCreate: so does every communicator creation (Dup, Split,
	// Create). Free is local and never raises a failure error, so it is
	// uniform as it is.
	UniformCreate
)

var uniformNames = [...]string{"local", "coll", "create"}

func (u ErrorUniform) String() string {
	if u >= 0 && int(u) < len(uniformNames) {
		return uniformNames[u]
	}
	return fmt.Sprintf("ErrorUniform(%d)", int(u))
}

// The info keys SetInfo knows.
const (
	InfoErrorRange   = "mpi_error_range"
	InfoErrorUniform = "mpi_error_uniform"
)

// SetErrorRange sets c's error range at this process. Set it alike at
// every member: a revoke it causes reaches them all anyway. A range that
// a failure already known here falls within revokes c at once.
func (c *Comm) SetErrorRange(r ErrorRange) error {
	if err := c.valid(); err != nil {
		return err
	}
	if r < RangeOperation || r > RangeGlobal {
		return fmt.Errorf("%w: error range %d", ErrInvalid, int(r))
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	c.errRange = r
	for _, w := range e.order {
		e.rangeRevoke(c, w)
	}
	return nil
}

// ErrorRange returns c's error range.
func (c *Comm) ErrorRange() ErrorRange {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return c.errRange
}

// SetErrorUniform sets c's error uniformity. UniformColl and
// UniformCreate need package ft's agreement (it registers itself when a
// program imports it): without it they return an error matching
// ErrNotSupported.
func (c *Comm) SetErrorUniform(u ErrorUniform) error {
	if err := c.valid(); err != nil {
		return err
	}
	switch u {
	case UniformLocal:
	case UniformColl, UniformCreate:
		if agreement.Load() == nil {
			return fmt.Errorf("%w: error uniformity %v needs package ft's agreement (import github.com/rivet-hpc/rivet/ft)", ErrNotSupported, u)
		}
	default:
		return fmt.Errorf("%w: error uniformity %d", ErrInvalid, int(u))
	}
	c.errUniform.Store(int32(u))
	return nil
}

// ErrorUniform returns c's error uniformity.
func (c *Comm) ErrorUniform() ErrorUniform {
	if c == nil {
		return UniformLocal
	}
	return ErrorUniform(c.errUniform.Load())
}

// SetInfo sets an info key of c by its MPI name and value
// (MPI_Comm_set_info): InfoErrorRange ("operation", "group", "global")
// or InfoErrorUniform ("local", "coll", "create"). An unknown key or
// value is an error matching ErrInvalid.
func (c *Comm) SetInfo(key, value string) error {
	switch key {
	case InfoErrorRange:
		for r, name := range rangeNames {
			if value == name {
				return c.SetErrorRange(ErrorRange(r))
			}
		}
		return fmt.Errorf("%w: %s=%q (want operation, group or global)", ErrInvalid, key, value)
	case InfoErrorUniform:
		for u, name := range uniformNames {
			if value == name {
				return c.SetErrorUniform(ErrorUniform(u))
			}
		}
		return fmt.Errorf("%w: %s=%q (want local, coll or create)", ErrInvalid, key, value)
	}
	return fmt.Errorf("%w: info key %q (want %s or %s)", ErrInvalid, key, InfoErrorRange, InfoErrorUniform)
}

// Info returns the value of an info key of c, as SetInfo takes it, and
// whether the key is one c has.
func (c *Comm) Info(key string) (string, bool) {
	switch key {
	case InfoErrorRange:
		return c.ErrorRange().String(), true
	case InfoErrorUniform:
		return c.ErrorUniform().String(), true
	}
	return "", false
}

// rangeRevoke revokes c if its error range covers the failure of world
// rank w; with e.mu held.
func (e *engine) rangeRevoke(c *Comm, w int) {
	if c.errRange == RangeGlobal || c.errRange == RangeGroup && c.fromWorld(w) >= 0 {
		e.revoke(c, 0)
	}
}
