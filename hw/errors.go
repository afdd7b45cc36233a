//go:build linux

package hw

import "errors"

var (
	// ErrNotSupported is wrapped by every feature probe that finds a
	// capability missing from this kernel or machine.
	ErrNotSupported = errors.New("not supported")
	// ErrNotFound is wrapped when something named does not exist: a
	// device, port, netdev or GID here, a bootstrap key in fabric.
	ErrNotFound = errors.New("not found")
)
