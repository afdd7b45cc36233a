//go:build linux

package hw

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// EventKind says what an Event reports.
type EventKind int

// Event kinds.
const (
	// EventLinkUp: a netdev that carries an RDMA port came up (IFF_UP and
	// carrier).
	EventLinkUp EventKind = iota + 1
	// EventLinkDown: such a netdev went down or lost carrier.
	EventLinkDown
	// EventPortActive: an RDMA port became ACTIVE.
	EventPortActive
	// EventPortDown: an RDMA port left ACTIVE; Event.State says for what.
	EventPortDown
	// EventError: the stream failed; Event.Err says why. The channel is
	// closed after it.
	EventError
	// EventDeviceFatal: the device is gone (uverbs IB_EVENT_DEVICE_FATAL).
	EventDeviceFatal
	// EventCQError: a completion queue overflowed (IB_EVENT_CQ_ERR).
	EventCQError
	// EventQPError: a queue pair hit a fatal, request or access error
	// (IB_EVENT_QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR); Event.QPN names it.
	EventQPError
	// EventAsync: any other uverbs async event; Event.Code is its
	// ibv_event_type.
	EventAsync
)

var eventKindNames = map[EventKind]string{
	EventLinkUp: "LINK_UP", EventLinkDown: "LINK_DOWN",
	EventPortActive: "PORT_ACTIVE", EventPortDown: "PORT_ERR", EventError: "ERROR",
	EventDeviceFatal: "DEVICE_FATAL", EventCQError: "CQ_ERR", EventQPError: "QP_ERR", EventAsync: "ASYNC",
}

// String names the kind; port events use the verbs async event names.
func (k EventKind) String() string {
	if s, ok := eventKindNames[k]; ok {
		return s
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one change seen by Watch.
type Event struct {
	Kind   EventKind
	Time   time.Time // when the change was observed
	Device string    // the RDMA device, for port events (and link events, when known)
	Port   int
	Netdev string
	State  PortState // the port's new state, for port events
	QPN    uint32    // for EventQPError
	Code   int       // the uverbs event type (ibv_event_type), for events from the device
	Err    error     // for EventError
}

func (e Event) String() string {
	switch e.Kind {
	case EventLinkUp, EventLinkDown:
		return fmt.Sprintf("%s netdev %s", e.Kind, e.Netdev)
	case EventError:
		return fmt.Sprintf("%s %v", e.Kind, e.Err)
	case EventDeviceFatal, EventCQError, EventAsync:
		return fmt.Sprintf("%s %s (event %d)", e.Kind, e.Device, e.Code)
	case EventQPError:
		return fmt.Sprintf("%s %s QP %#x (event %d)", e.Kind, e.Device, e.QPN, e.Code)
	}
	return fmt.Sprintf("%s %s port %d (%s) state %s", e.Kind, e.Device, e.Port, e.Netdev, e.State)
}

// rescanDelays are when ports are looked at again after a link update: the
// netlink message can arrive before the RDMA driver has moved the port.
var rescanDelays = []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}

// pollInterval bounds how late a port change without a link update (an
// InfiniBand port, say) is reported.
var pollInterval = time.Second

// Watch streams link and port events until ctx ends, then closes the
// channel. Events describe changes after Watch returns; the current state is
// what Devices reports. Events from sources (a verbs.Context's async events,
// say) are merged into the stream until each source closes.
func Watch(ctx context.Context, sources ...<-chan Event) (<-chan Event, error) {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	nlErr := make(chan error, 1)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case nlErr <- err:
			default:
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("subscribing to link updates: %w", err)
	}
	w := &watcher{out: make(chan Event, 64), ports: scanPorts(), links: map[string]bool{}}
	// Forwarders stop when a source closes or the watcher ends, whichever
	// is first; the output closes after the last of them.
	ctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, src := range sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case e, ok := <-src:
					if !ok {
						return
					}
					w.emit(ctx, e)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		defer close(w.out)
		defer wg.Wait()
		defer stop()
		defer close(done)
		w.run(ctx, updates, nlErr)
	}()
	return w.out, nil
}

type portKey struct {
	dev  string
	port int
}

type portInfo struct {
	state  PortState
	netdev string
}

type watcher struct {
	out   chan Event
	ports map[portKey]portInfo
	links map[string]bool // netdev -> up, for netdevs that carry RDMA ports
}

func (w *watcher) run(ctx context.Context, updates <-chan netlink.LinkUpdate, nlErr <-chan error) {
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	rescan := time.NewTimer(time.Hour)
	rescan.Stop()
	var pending []time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case err := <-nlErr:
			w.emit(ctx, Event{Kind: EventError, Time: time.Now(), Err: err})
			return
		case u, ok := <-updates:
			if !ok {
				w.emit(ctx, Event{Kind: EventError, Time: time.Now(), Err: fmt.Errorf("link subscription closed")})
				return
			}
			w.link(ctx, u)
			now := time.Now()
			for _, d := range rescanDelays {
				pending = append(pending, now.Add(d))
			}
		case <-poll.C:
			w.scan(ctx)
			continue
		case <-rescan.C:
			w.scan(ctx)
		}
		// Arm the timer for the earliest pending rescan still in the future.
		now := time.Now()
		next := pending[:0]
		for _, t := range pending {
			if t.After(now) {
				next = append(next, t)
			}
		}
		pending = next
		if len(pending) > 0 {
			earliest := pending[0]
			for _, t := range pending {
				if t.Before(earliest) {
					earliest = t
				}
			}
			rescan.Reset(time.Until(earliest))
		}
	}
}

// link handles one netlink update: a link event for netdevs under RDMA
// ports, then an immediate port scan.
func (w *watcher) link(ctx context.Context, u netlink.LinkUpdate) {
	name := u.Attrs().Name
	up := u.IfInfomsg.Flags&unix.IFF_UP != 0 && u.IfInfomsg.Flags&unix.IFF_RUNNING != 0 && u.Header.Type != unix.RTM_DELLINK
	w.scan(ctx)
	var dev string
	for k, p := range w.ports {
		if p.netdev == name {
			dev = k.dev
		}
	}
	if dev == "" {
		return
	}
	if was, seen := w.links[name]; !seen || was != up {
		w.links[name] = up
		kind := EventLinkDown
		if up {
			kind = EventLinkUp
		}
		w.emit(ctx, Event{Kind: kind, Time: time.Now(), Netdev: name, Device: dev})
	}
}

// scan reads every port's state and reports the ones that changed.
func (w *watcher) scan(ctx context.Context) {
	now := scanPorts()
	for k, p := range now {
		old, seen := w.ports[k]
		if seen && old.netdev != "" && p.netdev == "" {
			p.netdev = old.netdev // GID entries can vanish while a link is down
			now[k] = p
		}
		if seen && old.state == p.state {
			continue
		}
		kind := EventPortDown
		if p.state == PortActive {
			kind = EventPortActive
		} else if !seen || old.state != PortActive {
			continue // DOWN -> INIT and the like are not news
		}
		w.emit(ctx, Event{Kind: kind, Time: time.Now(), Device: k.dev, Port: k.port, Netdev: p.netdev, State: p.state})
	}
	w.ports = now
}

func (w *watcher) emit(ctx context.Context, e Event) {
	select {
	case w.out <- e:
	case <-ctx.Done():
	}
}

// scanPorts reads the state and netdev of every RDMA port from sysfs only:
// cheap enough to run on every link update.
func scanPorts() map[portKey]portInfo {
	m := map[portKey]portInfo{}
	base := filepath.Join(sysfsRoot, "class/infiniband")
	devs, _ := readDirNames(base)
	for _, d := range devs {
		parent, _ := readAttr(filepath.Join(base, d, "parent"))
		ports, _ := readDirNames(filepath.Join(base, d, "ports"))
		for _, pn := range ports {
			num, err := strconv.Atoi(pn)
			if err != nil {
				continue
			}
			dir := filepath.Join(base, d, "ports", pn)
			s, err := readAttr(filepath.Join(dir, "state"))
			if err != nil {
				continue
			}
			st, _ := parseEnumAttr(s)
			info := portInfo{state: PortState(st), netdev: parent}
			if nd, err := readAttr(filepath.Join(dir, "gid_attrs/ndevs/0")); err == nil && nd != "" {
				info.netdev = nd
			}
			m[portKey{d, num}] = info
		}
	}
	return m
}
