//go:build linux

package hw

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// maxDeviceName is IB_DEVICE_NAME_MAX less the terminating NUL.
const maxDeviceName = 63

// AddRXE creates a soft-RoCE device called name on netdev, like
// `rdma link add NAME type rxe netdev NETDEV`. It needs CAP_NET_ADMIN.
// The error wraps ErrNotFound for a missing netdev, os.ErrExist for a taken
// name or a netdev that already has an rxe device, and os.ErrPermission
// without the capability.
func AddRXE(name, netdev string) error {
	if name == "" || len(name) > maxDeviceName {
		return fmt.Errorf("rxe add: invalid device name %q (1 to %d bytes)", name, maxDeviceName)
	}
	if _, err := netlink.LinkByName(netdev); err != nil {
		return fmt.Errorf("rxe add %s: netdev %q: %w", name, netdev, ErrNotFound)
	}
	if err := HaveRDMANetlink(); err != nil {
		return fmt.Errorf("rxe add %s: %w", name, err)
	}
	err := netlink.RdmaLinkAdd(name, "rxe", netdev)
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("rxe add %s: %w (needs CAP_NET_ADMIN: run as root)", name, err)
	case errors.Is(err, unix.EEXIST):
		return fmt.Errorf("rxe add %s: %w", name, &existError{"netdev " + netdev + " already has an rxe device", err})
	case errors.Is(err, unix.ENFILE):
		// ib_register_device reports a name in use as ENFILE.
		return fmt.Errorf("rxe add %s: %w", name, &existError{"the device name is taken", err})
	case errors.Is(err, unix.EINVAL):
		// The kernel answers EINVAL when no "rxe" link type is registered,
		// i.e. rdma_rxe is not loaded and could not be auto-loaded.
		if _, serr := os.Stat(filepath.Join(sysfsRoot, "module/rdma_rxe")); serr != nil {
			if perr := HaveRXE(); perr != nil {
				return fmt.Errorf("rxe add %s: %w", name, perr)
			}
			return fmt.Errorf("rxe add %s: %w (module rdma_rxe is not loaded: modprobe rdma_rxe)", name, err)
		}
	}
	return fmt.Errorf("rxe add %s on %s: %w", name, netdev, err)
}

// DeleteRXE removes a soft-RoCE device, like `rdma link delete NAME`.
func DeleteRXE(name string) error {
	if _, err := os.Stat(filepath.Join(sysfsRoot, "class/infiniband", name)); err != nil {
		return fmt.Errorf("rxe del: RDMA device %q: %w", name, ErrNotFound)
	}
	if d, _ := readAttr(filepath.Join(sysfsRoot, "class/infiniband", name, "parent")); d == "" {
		return fmt.Errorf("rxe del: %q is not a software RDMA device", name)
	}
	err := netlink.RdmaLinkDel(name)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("rxe del %s: %w (needs CAP_NET_ADMIN: run as root)", name, err)
	}
	return fmt.Errorf("rxe del %s: %w", name, err)
}

// existError reads as a sentence but matches os.ErrExist and the kernel's
// errno, whose own text ("too many open files in system" for ENFILE) would
// mislead.
type existError struct {
	msg   string
	errno error
}

func (e *existError) Error() string   { return e.msg }
func (e *existError) Unwrap() []error { return []error{os.ErrExist, e.errno} }
