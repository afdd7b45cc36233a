//go:build linux

package hw

import "errors"

var (
	// ErrNotSupported is wrapped by every feature probe that finds a
	// capability missing from this kernel or machine.
	ErrNotSupported = errors.New("not supported")
	// ErrNotFound is wrapped when a named device, port, netdev or GID does
	// not exist.
	ErrNotFound = errors.New("not found")
)
