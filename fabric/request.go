package fabric

import (
	"context"
	"errors"
	"fmt"
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

// A Request is a nonblocking operation in progress. Complete it with Wait
// or Test (or WaitAll/WaitAny); its buffer belongs to the fabric until
// then. A Request may be used from one goroutine at a time.
type Request struct {
	e      *engine
	comm   *Comm
	kind   uint8
	state  uint8
	pooled bool // the engine's own, for blocking calls
	orphan bool // abandoned by a cancelled blocking call: freed on completion
	buf    []byte
	peer   int // send: the destination's world rank; receive: source comm rank or AnySource
	tag    int
	h      hdr // the frame a send (or control request) sends
	status Status
	err    error
	next   *Request
	prev   *Request
}

const (
	reqSend uint8 = iota + 1
	reqRecv
	reqCtl // a control frame waiting for room (FIN)
)

const (
	stIdle    uint8 = iota
	stPosted        // receive waiting for a match
	stPending       // send waiting for room in the provider
	stRdv           // rendezvous send waiting for FIN
	stDone
)

// Wait blocks until the request completes and returns its status and
// error. When ctx ends first, a request that has not started moving data
// is cancelled (Status.Cancelled) and Wait returns ctx's error; one
// already moving data stays active, and Wait returns ctx's error — wait
// again to complete it.
func (r *Request) Wait(ctx context.Context) (Status, error) {
	if r == nil {
		return Status{}, errors.New("fabric: Wait on a nil request")
	}
	err := r.e.wait(ctx, r)
	if err != nil {
		return r.status, err
	}
	return r.status, r.err
}

// Test reports whether the request has completed, making progress once
// if not; when done it returns the status and error too.
func (r *Request) Test() (Status, bool, error) {
	if r == nil {
		return Status{}, false, errors.New("fabric: Test on a nil request")
	}
	e := r.e
	e.mu.Lock()
	if r.state != stDone {
		e.progress()
	}
	done := r.state == stDone
	e.mu.Unlock()
	if !done {
		return Status{}, false, nil
	}
	return r.status, true, r.err
}

// Cancel cancels the request if it has not started moving data (an
// unmatched receive, or a send still queued locally) and reports whether
// it did. A cancelled request is complete, with Status.Cancelled set.
func (r *Request) Cancel() bool {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	return r.e.cancel(r)
}

// WaitAll waits for every request, and returns the errors of those that
// failed joined (nil if none did). When ctx ends first it cancels what it
// can and returns ctx's error.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	if len(reqs) == 0 {
		return nil
	}
	e := reqs[0].e
	for _, r := range reqs {
		if r == nil {
			return errors.New("fabric: WaitAll with a nil request")
		}
		if r.e != e {
			return errors.New("fabric: WaitAll over requests of different endpoints")
		}
	}
	next := 0 // requests before next are done
	err := e.waitUntil(ctx, func() bool {
		for next < len(reqs) && reqs[next].state == stDone {
			next++
		}
		return next == len(reqs)
	}, func() {
		for _, r := range reqs {
			e.cancel(r)
		}
	})
	if err != nil {
		return err
	}
	var errs []error
	for i, r := range reqs {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, r.err))
		}
	}
	return errors.Join(errs...)
}

// WaitAny waits until one of reqs completes and returns its index, status
// and error. Nil requests are ignored; with none left it returns -1.
func WaitAny(ctx context.Context, reqs ...*Request) (int, Status, error) {
	var e *engine
	for _, r := range reqs {
		if r != nil {
			e = r.e
			break
		}
	}
	if e == nil {
		return -1, Status{}, nil
	}
	idx := -1
	err := e.waitUntil(ctx, func() bool {
		for i, r := range reqs {
			if r != nil && r.state == stDone {
				idx = i
				return true
			}
		}
		return false
	}, nil)
	if err != nil {
		return -1, Status{}, err
	}
	return idx, reqs[idx].status, reqs[idx].err
}

// reqList is an intrusive FIFO of requests.
type reqList struct{ head, tail *Request }

func (l *reqList) empty() bool { return l.head == nil }

func (l *reqList) push(r *Request) {
	r.next, r.prev = nil, l.tail
	if l.tail != nil {
		l.tail.next = r
	} else {
		l.head = r
	}
	l.tail = r
}

func (l *reqList) remove(r *Request) {
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

func (l *reqList) contains(r *Request) bool {
	for x := l.head; x != nil; x = x.next {
		if x == r {
			return true
		}
	}
	return false
}
