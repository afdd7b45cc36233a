//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// Status describes a received (or probed) message.
type Status struct {
	Source    int  // sender's rank in the communicator
	Tag       int  // the message's tag
	Count     int  // bytes received (for a probe: the message's length)
	Cancelled bool // the request was cancelled before it matched
}

// Count returns how many elements of type T a status's message holds.
func Count[T Elem](st Status) int { return st.Count / sizeOf[T]() }

// A Request is a handle to a nonblocking operation (MPI_Request). Wait or
// Test completes it — and, as in MPI, sets the handle to the null Request,
// whose Wait returns at once — and until then the operation's buffer
// belongs to the fabric. The zero Request is null. Requests are values:
// starting one allocates nothing. A copy of a handle whose operation
// another copy completed gets ErrRequestDone. A Request may be used from
// one goroutine at a time.
type Request struct {
	op  *op
	gen uint64
}

// op is the fabric's side of an operation in progress; ops are pooled.
type op struct {
	e      *engine
	comm   *Comm
	gen    uint64 // bumped each time the op is reused
	kind   uint8
	state  uint8
	orphan bool // abandoned by a cancelled blocking call: freed on completion
	buf    []byte
	peer   int // send: the destination's world rank; receive: source comm rank or AnySource
	tag    int
	h      wire.Header // the frame a send (or control op) sends
	status Status
	err    error
	sched  *Schedule // reqSched: the schedule this op completes
	next   *op
	prev   *op

	// A nonblocking collective on a communicator with uniform errors
	// (Comm.UniformRequest): done once contrib is decided too.
	contrib Contribution
}

const (
	reqSend uint8 = iota + 1
	reqRecv
	reqCtl   // a control frame waiting for room (FIN)
	reqUnexp // an unexpected message: h, peer (world rank) and its payload in buf
	reqSched // a schedule (collective) in progress
)

const (
	stIdle    uint8 = iota
	stPosted        // receive waiting for a match
	stPending       // send waiting for room in the provider
	stRdv           // rendezvous send waiting for FIN
	stActive        // schedule in progress
	stDone
)

func (e *engine) handle(o *op) Request { return Request{op: o, gen: o.gen} }

// live reports whether r still names its operation; call with e.mu held.
func (r *Request) live() bool { return r.op.gen == r.gen }

// IsNull reports whether r is the null request: never started, or
// already completed by Wait or Test.
func (r *Request) IsNull() bool { return r.op == nil }

// complete takes a finished operation's outcome, returns the op to the
// pool and nulls the handle; call with e.mu held (a uniform operation's
// settling releases it meanwhile).
func (r *Request) complete() (Status, error) {
	o := r.op
	if o.contrib != nil {
		o.e.settle(o)
	}
	st, err := o.status, o.err
	if o.kind == reqSched {
		o.e.recycle(o.sched)
	}
	o.e.release(o)
	*r = Request{}
	return st, err
}

// Wait blocks until the operation completes and returns its status and
// error, leaving r null. When ctx ends first, an operation that has not
// started moving data is cancelled (Status.Cancelled) and Wait returns
// ctx's error; one already moving data stays active, r stays as it was,
// and Wait returns ctx's error — wait again to complete it.
func (r *Request) Wait(ctx context.Context) (Status, error) {
	if r.op == nil {
		return Status{}, nil
	}
	e := r.op.e
	e.mu.Lock()
	if !r.live() {
		e.mu.Unlock()
		*r = Request{}
		return Status{}, ErrRequestDone
	}
	if r.op.over() { // already complete: one lock round trip
		defer e.mu.Unlock()
		return r.complete()
	}
	e.mu.Unlock()
	werr := e.wait(ctx, r.op)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !r.op.over() {
		return Status{}, werr
	}
	st, err := r.complete()
	if werr != nil {
		err = werr
	}
	return st, err
}

// Test reports whether the operation has completed, making progress once
// if not; when it has, Test returns its status and error and leaves r
// null. Testing the null request reports true.
func (r *Request) Test() (Status, bool, error) {
	if r.op == nil {
		return Status{}, true, nil
	}
	e := r.op.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if !r.live() {
		*r = Request{}
		return Status{}, true, ErrRequestDone
	}
	if !r.op.over() {
		e.progress()
		if !r.op.over() {
			return Status{}, false, nil
		}
	}
	st, err := r.complete()
	return st, true, err
}

// Cancel cancels the operation if it has not started moving data (an
// unmatched receive, or a send still queued locally) and reports whether
// it did. A cancelled operation still completes through Wait or Test,
// with Status.Cancelled set.
func (r *Request) Cancel() bool {
	if r.op == nil {
		return false
	}
	e := r.op.e
	e.mu.Lock()
	defer e.mu.Unlock()
	return r.live() && e.cancel(r.op)
}

// WaitAll waits for every request in reqs and leaves them null. statuses,
// if not nil, must be as long as reqs and receives each one's status.
// It returns the errors of those that failed, joined (nil if none did).
// When ctx ends first it cancels what it can and returns ctx's error;
// requests still active stay as they were. It allocates nothing unless
// an operation failed.
func WaitAll(ctx context.Context, reqs []Request, statuses []Status) error {
	if statuses != nil && len(statuses) != len(reqs) {
		return fmt.Errorf("%w: %d statuses for %d requests", ErrInvalid, len(statuses), len(reqs))
	}
	var e *engine
	for i := range reqs {
		if reqs[i].op == nil {
			continue
		}
		if e == nil {
			e = reqs[i].op.e
		} else if reqs[i].op.e != e {
			return fmt.Errorf("%w: WaitAll over requests of different endpoints", ErrInvalid)
		}
	}
	if e == nil {
		for i := range statuses {
			statuses[i] = Status{}
		}
		return nil
	}
	w := waiter{e: e, ctx: ctx}
	next := 0 // requests before next are done
	var werr error
	for {
		e.mu.Lock()
		for next < len(reqs) && reqs[next].over() {
			next++
		}
		if next < len(reqs) {
			w.round()
			for next < len(reqs) && reqs[next].over() {
				next++
			}
		}
		if next == len(reqs) {
			break // with e.mu held
		}
		if e.closed {
			werr = ErrClosed
			break
		}
		if w.scanDue() {
			e.scan(nil)
		}
		e.mu.Unlock()
		if w.pause() {
			e.mu.Lock()
			for j := range reqs {
				if reqs[j].op != nil && reqs[j].live() {
					e.cancel(reqs[j].op)
				}
			}
			werr = ctx.Err()
			break // with e.mu held
		}
	}
	var errs []error
	for i := range reqs {
		r := &reqs[i]
		if !r.over() || r.op == nil {
			if statuses != nil && r.op == nil {
				statuses[i] = Status{}
			}
			continue
		}
		var st Status
		var err error
		if r.live() {
			st, err = r.complete()
		} else {
			*r, err = Request{}, ErrRequestDone
		}
		if statuses != nil {
			statuses[i] = st
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
		}
	}
	e.mu.Unlock()
	if werr != nil {
		return werr
	}
	return errors.Join(errs...)
}

// over reports whether r needs no more waiting: null, completed through
// another copy, or done; call with e.mu held.
func (r *Request) over() bool {
	return r.op == nil || !r.live() || r.op.over()
}

// over reports whether r is complete: done, and for a uniform operation
// its agreement decided. With e.mu held.
func (r *op) over() bool {
	return r.state == stDone && (r.contrib == nil || r.contrib.Decided())
}

// WaitAny waits until one of reqs completes, leaves it null and returns
// its index, status and error. Null requests are ignored; with none
// left it returns -1.
func WaitAny(ctx context.Context, reqs []Request) (int, Status, error) {
	var e *engine
	for i := range reqs {
		if reqs[i].op != nil {
			e = reqs[i].op.e
			break
		}
	}
	if e == nil {
		return -1, Status{}, nil
	}
	idx := -1
	err := e.waitUntil(ctx, func() bool {
		for i := range reqs {
			if reqs[i].op != nil && reqs[i].over() {
				idx = i
				return true
			}
		}
		return false
	})
	if err != nil {
		return -1, Status{}, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if !reqs[idx].live() {
		reqs[idx] = Request{}
		return idx, Status{}, ErrRequestDone
	}
	st, err := reqs[idx].complete()
	return idx, st, err
}

// reqList is an intrusive FIFO of operations.
type reqList struct{ head, tail *op }

func (l *reqList) empty() bool { return l.head == nil }

func (l *reqList) push(r *op) {
	r.next, r.prev = nil, l.tail
	if l.tail != nil {
		l.tail.next = r
	} else {
		l.head = r
	}
	l.tail = r
}

func (l *reqList) remove(r *op) {
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		l.head = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		l.tail = r.prev
	}
	r.next, r.prev = nil, nil
}
