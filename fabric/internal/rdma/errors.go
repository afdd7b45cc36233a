//go:build linux

package rdma

import "errors"

// What the provider says of a peer it lost, and of an operation it
// refused; the fabric turns them into its own errors.
var (
	// ErrGone says a peer's process is gone.
	ErrGone = errors.New("process is gone")
	// ErrNoRoute says a peer cannot be reached, which is not known to be
	// a death.
	ErrNoRoute = errors.New("no route")
	// ErrTooLong says a one-sided operation is longer than the port's
	// largest message.
	ErrTooLong = errors.New("longer than the port's largest message")

	errClosing = errors.New("the provider is closing")
	errFenced  = errors.New("declared failed by this process")
)
