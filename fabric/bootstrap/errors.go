//go:build linux

package bootstrap

import (
	"errors"

	"github.com/rivet-hpc/rivet/hw"
)

// Errors of the bootstrap; match them with errors.Is.
var (
	// ErrNoSecret is returned when a job's processes would meet over TCP
	// without the secret that keeps others out.
	ErrNoSecret = errors.New("bootstrap: RIVET_JOB_SECRET is not set")

	// ErrNotFound is returned by Get for a key the rank did not put. It is
	// hw.ErrNotFound, as fabric.ErrNotFound is, so one errors.Is test
	// covers every layer.
	ErrNotFound = hw.ErrNotFound

	// ErrDenied is returned when the other side does not prove the job secret.
	ErrDenied = errors.New("bootstrap: the job secret does not match")

	// ErrForeignLauncher is returned by Detect (and Foreign) when the
	// process was started as one of several by a launcher whose protocol
	// Rivet does not speak — MVAPICH's mpirun_rsh, Open MPI's mpirun with
	// its PMIx server's variables removed: going on alone would run each
	// process as a job of its own.
	ErrForeignLauncher = errors.New("bootstrap: started by a launcher Rivet cannot join")

	// ErrInJob is returned by InJob when the process is one of several
	// another launcher started, so that a job it launched would be one of
	// several too.
	ErrInJob = errors.New("bootstrap: this process is one of a job another launcher started")
)
