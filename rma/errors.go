//go:build linux

package rma

import (
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric"
)

var (
	// ErrEpoch: an operation or synchronization outside the epoch it
	// needs — an access outside any access epoch, Lock twice, Unlock
	// without Lock, Lock while a fence epoch is open, Complete without
	// Start. It matches fabric.ErrInvalid.
	ErrEpoch = fmt.Errorf("rma: wrong synchronization state: %w", fabric.ErrInvalid)
	// ErrRange: a displacement and length outside the target's window,
	// or an address not attached to a dynamic window. It matches
	// fabric.ErrInvalid.
	ErrRange = fmt.Errorf("rma: outside the target's window: %w", fabric.ErrInvalid)
	// ErrType: an element type or operation the call cannot take (a
	// pointer type, CompareAndSwap on a float, a user-defined op in an
	// accumulate, elements over 8 bytes or not aligned to their size in
	// an accumulate). It matches fabric.ErrInvalid.
	ErrType = fmt.Errorf("rma: unsupported element type or operation: %w", fabric.ErrInvalid)
	// ErrMemory: window memory Rivet cannot expose — Go heap memory,
	// which the runtime may move or free while a NIC holds its address.
	// Use Allocate, or memory from fabric.Endpoint.AllocMem. It matches
	// fabric.ErrInvalid.
	ErrMemory = fmt.Errorf("rma: window memory must come from AllocMem: %w", fabric.ErrInvalid)
	// ErrFreed: a call on a window already freed.
	ErrFreed = errors.New("rma: window freed")
)
