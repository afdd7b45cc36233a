//go:build linux

package hw

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// feature caches the result of one probe, cilium/ebpf style: the probe runs
// once per process and its error wraps ErrNotSupported when the capability
// is missing, or is some other error when the probe itself failed.
type feature struct {
	once sync.Once
	err  error
	fn   func() error
}

func (f *feature) check() error {
	f.once.Do(func() { f.err = f.fn() })
	return f.err
}

var (
	uverbsFeature = &feature{fn: probeUverbs}
	rxeFeature    = &feature{fn: probeRXE}
	rdmaNLFeature = &feature{fn: probeRDMANetlink}
)

// HaveUverbs reports whether the kernel exposes the uverbs interface (the
// ib_uverbs module is loaded). It says nothing about devices being present.
func HaveUverbs() error { return uverbsFeature.check() }

// HaveRXE reports whether soft-RoCE (rdma_rxe) is loaded or loadable.
func HaveRXE() error { return rxeFeature.check() }

// HaveRDMANetlink reports whether the kernel answers RDMA netlink requests,
// which adding and deleting rxe links needs.
func HaveRDMANetlink() error { return rdmaNLFeature.check() }

func probeUverbs() error {
	b, err := os.ReadFile(filepath.Join(sysfsRoot, "class/infiniband_verbs/abi_version"))
	if os.IsNotExist(err) {
		return fmt.Errorf("uverbs: %w (no %s/class/infiniband_verbs: load ib_uverbs, or run under rxevm)", ErrNotSupported, sysfsRoot)
	}
	if err != nil {
		return fmt.Errorf("uverbs probe: %w", err)
	}
	if v := strings.TrimSpace(string(b)); v != "6" {
		return fmt.Errorf("uverbs ABI version %s: %w (want 6)", v, ErrNotSupported)
	}
	return nil
}

func probeRXE() error {
	if _, err := os.Stat(filepath.Join(sysfsRoot, "module/rdma_rxe")); err == nil {
		return nil
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return fmt.Errorf("rxe probe: %w", err)
	}
	release := unix.ByteSliceToString(u.Release[:])
	dep, err := os.ReadFile(filepath.Join("/lib/modules", release, "modules.dep"))
	if err != nil {
		return fmt.Errorf("rdma_rxe: %w (module not loaded and no modules.dep for kernel %s)", ErrNotSupported, release)
	}
	for _, line := range strings.Split(string(dep), "\n") {
		mod, _, _ := strings.Cut(line, ":")
		if base := filepath.Base(mod); strings.HasPrefix(base, "rdma_rxe.ko") {
			return nil
		}
	}
	return fmt.Errorf("rdma_rxe: %w (kernel %s has no rdma_rxe module; CONFIG_RDMA_RXE is off)", ErrNotSupported, release)
}

func probeRDMANetlink() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err == unix.EPROTONOSUPPORT || err == unix.EAFNOSUPPORT {
		return fmt.Errorf("RDMA netlink: %w (ib_core is not loaded and could not be, or the kernel lacks CONFIG_INFINIBAND)", ErrNotSupported)
	}
	if err != nil {
		return fmt.Errorf("RDMA netlink probe: %w", err)
	}
	unix.Close(fd)
	return nil
}
