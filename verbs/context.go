//go:build linux

package verbs

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/hw"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// Context is an open RDMA device (ibv_context).
type Context struct {
	dev   hw.Device
	uv    *uverbs.Context
	attr  DeviceAttr
	async *os.File

	lifetime                // children: PDs, CQs and completion channels; mu also guards what follows
	cqs      map[uint64]*CQ // by user_handle, for completion events
	qps      map[uint64]*QP // by user_handle, for async events
	nextID   atomic.Uint64
	watching bool
}

// DeviceAttr is what QUERY_DEVICE reports that Rivet uses.
type DeviceAttr struct {
	FWVer       uint64
	MaxMRSize   uint64
	MaxQP       int
	MaxQPWR     int
	MaxSGE      int
	MaxCQ       int
	MaxCQE      int
	MaxMR       int
	MaxPD       int
	MaxQPRdAtom int // max_qp_rd_atom: outstanding RDMA reads/atomics a QP may initiate
	MaxQPInitRd int
	AtomicCap   int // 0 none, 1 HCA, 2 global
	PhysPortCnt int
	MaxSRQ      int // shared receive queues (0: none)
	MaxSRQWR    int
	MaxSRQSGE   int
}

// Open opens the RDMA device called name, or, if name is "", the first
// device with an ACTIVE port. Only soft-RoCE (rxe) devices are driven; any
// other returns an error wrapping ErrNotSupported.
func Open(name string) (*Context, error) {
	var dev hw.Device
	if name == "" {
		devs, _ := hw.Devices()
		for _, d := range devs {
			if len(d.Ports) > 0 && d.Ports[0].State == hw.PortActive {
				dev = d
				break
			}
		}
		if dev.Name == "" {
			if err := hw.HaveUverbs(); err != nil {
				return nil, fmt.Errorf("verbs: no device: %w", err)
			}
			return nil, fmt.Errorf("verbs: no RDMA device with an active port: %w", hw.ErrNotFound)
		}
	} else {
		d, err := hw.DeviceByName(name)
		if err != nil && d.Name == "" {
			return nil, fmt.Errorf("verbs: %w", err)
		}
		dev = d
	}
	if dev.Driver != "rxe" {
		return nil, fmt.Errorf("verbs: device %s (driver %q): %w: only the soft-RoCE provider exists so far", dev.Name, dev.Driver, ErrNotSupported)
	}
	if dev.Uverbs == "" {
		return nil, fmt.Errorf("verbs: device %s has no uverbs character device (is ib_uverbs loaded?)", dev.Name)
	}
	uv, err := uverbs.Open(dev.Uverbs)
	if err != nil {
		return nil, fmt.Errorf("verbs: opening %s: %w", dev.Name, err)
	}
	da, err := uv.QueryDevice()
	if err != nil {
		uv.Close()
		return nil, fmt.Errorf("verbs: %s: %w", dev.Name, err)
	}
	// The async fd becomes the Context's, read through the netpoller.
	if err := unix.SetNonblock(uv.AsyncFD, true); err != nil {
		uv.Close()
		return nil, fmt.Errorf("verbs: %s: async fd: %w", dev.Name, err)
	}
	async := os.NewFile(uintptr(uv.AsyncFD), dev.Name+"-async")
	uv.AsyncFD = -1
	c := &Context{
		lifetime: lifetime{kind: "device " + dev.Name},
		dev:      dev,
		uv:       uv,
		async:    async,
		cqs:      map[uint64]*CQ{},
		qps:      map[uint64]*QP{},
		attr: DeviceAttr{
			FWVer: da.FWVer, MaxMRSize: da.MaxMRSize, MaxQP: int(da.MaxQP), MaxQPWR: int(da.MaxQPWR),
			MaxSGE: int(da.MaxSGE), MaxCQ: int(da.MaxCQ), MaxCQE: int(da.MaxCQE), MaxMR: int(da.MaxMR),
			MaxPD: int(da.MaxPD), MaxQPRdAtom: int(da.MaxQPRdAtom), MaxQPInitRd: int(da.MaxQPInitRdAtom),
			AtomicCap: int(da.AtomicCap), PhysPortCnt: int(da.PhysPortCnt),
			MaxSRQ: int(da.MaxSRQ), MaxSRQWR: int(da.MaxSRQWR), MaxSRQSGE: int(da.MaxSRQSGE),
		},
	}
	return c, nil
}

// Device returns what hw knew of the device when it was opened.
func (c *Context) Device() hw.Device { return c.dev }

// Name is the device's name, e.g. "rxe0".
func (c *Context) Name() string { return c.dev.Name }

// Attr returns the device's limits.
func (c *Context) Attr() DeviceAttr { return c.attr }

// PortAttr is what QUERY_PORT reports.
type PortAttr struct {
	State       hw.PortState
	PhysState   hw.PhysState
	MaxMTU      hw.MTU
	ActiveMTU   hw.MTU
	GIDTableLen int
	MaxMsgSize  uint32
	LID         uint16
	LinkLayer   int // 1 InfiniBand, 2 Ethernet
}

// QueryPort asks the device about port (1-based).
func (c *Context) QueryPort(port int) (PortAttr, error) {
	if port < 1 || port > c.attr.PhysPortCnt {
		return PortAttr{}, invalid("port %d (device %s has %d)", port, c.dev.Name, c.attr.PhysPortCnt)
	}
	a, err := c.uv.QueryPort(uint8(port))
	if err != nil {
		return PortAttr{}, c.wrap(err)
	}
	return PortAttr{
		State: hw.PortState(a.State), PhysState: hw.PhysState(a.PhysState), MaxMTU: hw.MTU(a.MaxMTU),
		ActiveMTU: hw.MTU(a.ActiveMTU), GIDTableLen: int(a.GIDTableLen), MaxMsgSize: a.MaxMsgSize,
		LID: a.LID, LinkLayer: int(a.LinkLayer),
	}, nil
}

// Close closes the device. Every PD, CQ and completion channel must be
// closed first; otherwise Close returns an error wrapping ErrBusy and
// leaves everything open. Closing twice is not an error.
func (c *Context) Close() error {
	return c.close("PDs, CQs or channels are", func() error { return errors.Join(c.async.Close(), c.uv.Close()) }, nil)
}

// wrapIf is wrap for an error that may be nil.
func (c *Context) wrapIf(err error) error {
	if err == nil {
		return nil
	}
	return c.wrap(err)
}

func (c *Context) wrap(err error) error {
	return fmt.Errorf("verbs: %s: %w", c.dev.Name, err)
}
