//go:build linux

package verbs

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/rivet-hpc/rivet/hw"
)

// Async event types (enum ibv_event_type) that Events classifies.
const (
	eventCQErr       = 0
	eventQPFatal     = 1
	eventQPReqErr    = 2
	eventQPAccessErr = 3
	eventDeviceFatal = 8
	eventPortActive  = 9
	eventPortErr     = 10
)

// Events streams the device's async events as hw.Events until ctx ends or
// the Context closes; pass the channel to hw.Watch to merge it with link and
// port events. Only one stream per Context may be open.
func (c *Context) Events(ctx context.Context) (<-chan hw.Event, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, fmt.Errorf("verbs: %s: %w", c.dev.Name, ErrClosed)
	}
	if c.watching {
		return nil, fmt.Errorf("verbs: %s: %w: an event stream is already open", c.dev.Name, ErrBusy)
	}
	c.watching = true
	out := make(chan hw.Event, 16)
	go func() {
		defer func() {
			c.mu.Lock()
			c.watching = false
			c.mu.Unlock()
			close(out)
		}()
		stop := context.AfterFunc(ctx, func() { c.async.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
		var ev [16]byte // struct ib_uverbs_async_event_desc
		for {
			if _, err := io.ReadFull(c.async, ev[:]); err != nil {
				if ctx.Err() == nil {
					select {
					case out <- hw.Event{Kind: hw.EventError, Time: time.Now(), Device: c.dev.Name, Err: err}:
					default:
					}
				}
				c.async.SetReadDeadline(time.Time{})
				return
			}
			e := c.convert(binary.NativeEndian.Uint64(ev[0:]), int(binary.NativeEndian.Uint32(ev[8:])))
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func (c *Context) convert(element uint64, typ int) hw.Event {
	e := hw.Event{Time: time.Now(), Device: c.dev.Name, Code: typ}
	switch typ {
	case eventPortActive, eventPortErr:
		e.Kind, e.Port, e.State = hw.EventPortActive, int(element), hw.PortActive
		if typ == eventPortErr {
			e.Kind, e.State = hw.EventPortDown, hw.PortDown
		}
		for _, p := range c.dev.Ports {
			if p.Number == e.Port {
				e.Netdev = p.Netdev
			}
		}
	case eventDeviceFatal:
		e.Kind = hw.EventDeviceFatal
	case eventCQErr:
		e.Kind = hw.EventCQError
	case eventQPFatal, eventQPReqErr, eventQPAccessErr:
		e.Kind = hw.EventQPError
		c.mu.Lock()
		if qp := c.qps[element]; qp != nil {
			e.QPN = qp.qpn
		}
		c.mu.Unlock()
	default:
		e.Kind = hw.EventAsync
	}
	return e
}
