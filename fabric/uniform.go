//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// AgreeFunc is an agreement on c: the bitwise AND of every contributing
// member's flag, with an error matching ErrProcFailed at every member
// alike when a member failed unacknowledged (package ft's Agree).
type AgreeFunc func(ctx context.Context, c *Comm, flag int) (int, error)

// agreement is package ft's, registered by SetAgreement: this package
// cannot import ft, which is built on it.
var agreement atomic.Pointer[AgreeFunc]

// SetAgreement registers the agreement the error-uniformity keys use;
// package ft calls it when it is initialized.
func SetAgreement(f AgreeFunc) {
	if f != nil {
		agreement.Store(&f)
	}
}

// Uniform makes err — the outcome at this process of a collective
// operation on c — the same at every member when c's error uniformity
// covers it (UniformColl and UniformCreate; package collectives and
// communicator creation call it): the members agree on whether the
// operation succeeded everywhere, and where it did not, every member
// raises — its own error, or one matching ErrProcFailed. So the
// operation synchronizes, as MPI 4.1 §16.2.3 says it then must. With
// UniformLocal it returns err.
func (c *Comm) Uniform(ctx context.Context, err error) error {
	if c == nil || c.ErrorUniform() == UniformLocal {
		return err
	}
	return c.uniform(ctx, err)
}

func (c *Comm) uniform(ctx context.Context, err error) error {
	f := agreement.Load()
	if f == nil {
		return err
	}
	flag := 1
	if err != nil {
		flag = 0
	}
	v, aerr := (*f)(ctx, c, flag)
	switch {
	case aerr != nil && !errors.Is(aerr, ErrProcFailed):
		return aerr // ctx ended: the outcome is not known to be uniform
	case err != nil:
		return err
	case aerr != nil:
		return fmt.Errorf("%w (error uniformity %v)", aerr, c.ErrorUniform())
	case v == 0:
		return fmt.Errorf("%w: the operation failed at another member (error uniformity %v)", ErrProcFailed, c.ErrorUniform())
	}
	return nil
}

// uniformCreate makes a communicator creation's outcome uniform when c's
// error uniformity is UniformCreate: where it failed anywhere, every
// member frees what it made and raises.
func (c *Comm) uniformCreate(ctx context.Context, nc *Comm, err error) (*Comm, error) {
	if c.ErrorUniform() != UniformCreate {
		return nc, err
	}
	if err = c.uniform(ctx, err); err != nil && nc != nil {
		nc.Free()
		nc = nil
	}
	return nc, err
}
