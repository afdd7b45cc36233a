//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// An Agreement is the agreement the error-uniformity keys use: package
// ft's, registered by SetAgreement. This package cannot import ft, which
// is built on it.
type Agreement interface {
	// Agree is the bitwise AND of every contributing member's flag, with
	// an error matching ErrProcFailed at every member alike when a member
	// failed unacknowledged (ft.Agree).
	Agree(ctx context.Context, c *Comm, flag int) (int, error)
	// Reserve takes c's next agreement now, for a flag given later: a
	// nonblocking collective's outcome, known when it completes — in
	// another order at each member, while they start them in one order.
	Reserve(c *Comm) (Contribution, error)
}

// A Contribution is this process's part in an agreement taken by
// Agreement.Reserve.
type Contribution interface {
	// Contribute gives the flag. It is called once, with c's engine
	// locked (as FTHandler's methods are), and does not block.
	Contribute(flag int)
	// Decided reports whether the agreement is decided; with the engine
	// locked.
	Decided() bool
	// Wait waits for the decision, without the engine locked, and
	// returns what Agree would.
	Wait(ctx context.Context) (int, error)
}

var agreement atomic.Pointer[Agreement]

// SetAgreement registers the agreement the error-uniformity keys use;
// package ft calls it when it is initialized.
func SetAgreement(a Agreement) {
	if a != nil {
		agreement.Store(&a)
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
	a := agreement.Load()
	if a == nil {
		return err
	}
	v, aerr := (*a).Agree(ctx, c, flagOf(err))
	return uniformOutcome(c.ErrorUniform(), err, v, aerr)
}

func flagOf(err error) int {
	if err != nil {
		return 0
	}
	return 1
}

// uniformOutcome is an operation's outcome once its members agreed on
// it: err is the local outcome, v and aerr the agreement's.
func uniformOutcome(u ErrorUniform, err error, v int, aerr error) error {
	switch {
	case aerr != nil && !errors.Is(aerr, ErrProcFailed):
		return aerr // ctx ended: the outcome is not known to be uniform
	case err != nil:
		return err
	case aerr != nil:
		return fmt.Errorf("%w (error uniformity %v)", aerr, u)
	case v == 0:
		return fmt.Errorf("%w: the operation failed at another member (error uniformity %v)", ErrProcFailed, u)
	}
	return nil
}

// ReserveUniform is, on a communicator whose error uniformity covers
// collectives, the agreement a nonblocking collective about to start
// will complete with (see UniformRequest); on others it is nil. Members
// must call it in the same order as they start their collectives, just
// before each.
func (c *Comm) ReserveUniform() (Contribution, error) {
	if c == nil || c.ErrorUniform() == UniformLocal {
		return nil, nil
	}
	a := agreement.Load()
	if a == nil {
		return nil, nil
	}
	return (*a).Reserve(c)
}

// UniformRequest ties the request of a nonblocking collective on c, and
// the error of its start, to the agreement ReserveUniform took for it
// (nil: it returns r and err as they are). The collective's outcome at
// this process is this process's flag, given as soon as it completes —
// in the fabric's progress, whether or not anyone waits on it; the
// request completes once the members have agreed, with an error at every
// member or at none, as Uniform's. A start that failed gives its flag at
// once and returns its error.
func (c *Comm) UniformRequest(con Contribution, r Request, err error) (Request, error) {
	if con == nil {
		return r, err
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil || r.op == nil || !r.live() {
		con.Contribute(flagOf(err))
		return r, err
	}
	o := r.op
	o.contrib = con
	if o.state == stDone {
		con.Contribute(flagOf(o.err))
	}
	return r, nil
}

// settle gives a completed uniform operation the outcome its members
// agreed on. Call with e.mu held, the agreement decided; it releases
// e.mu meanwhile (taking in the agreement's failures takes it).
func (e *engine) settle(o *op) {
	con := o.contrib
	o.contrib = nil
	e.mu.Unlock()
	v, aerr := con.Wait(context.Background()) // decided: at once
	e.mu.Lock()
	o.err = uniformOutcome(o.comm.ErrorUniform(), o.err, v, aerr)
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
