//go:build linux

package verbs

import (
	"fmt"
	"sync"
)

// lifetime is what every verbs object shares: a count of the objects that
// depend on it, and a closed flag. A parent refuses to close while it has
// children, and nothing can be made from a closed parent. mu also guards
// the owner's other mutable state.
type lifetime struct {
	kind     string // "PD", "CQ", "device rxe0", … for messages
	mu       sync.Mutex
	children int
	closed   bool
}

// acquire registers a child; it fails once the object is closed.
func (l *lifetime) acquire() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("verbs: %s: %w", l.kind, ErrClosed)
	}
	l.children++
	return nil
}

// release unregisters a child.
func (l *lifetime) release() {
	l.mu.Lock()
	l.children--
	l.mu.Unlock()
}

// close is the body of every Close: nothing if already closed; ErrBusy,
// naming what is still open, if children remain; otherwise destroy, which
// releases the kernel object. Once destroy succeeds the object is closed,
// and after (unmapping, releasing the parent) runs without the lock.
func (l *lifetime) close(childNames string, destroy, after func() error) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.children > 0 {
		n := l.children
		l.mu.Unlock()
		return fmt.Errorf("verbs: closing %s: %w: %d %s open", l.kind, ErrBusy, n, childNames)
	}
	if err := destroy(); err != nil {
		l.mu.Unlock()
		return err
	}
	l.closed = true
	l.mu.Unlock()
	if after != nil {
		return after()
	}
	return nil
}
