//go:build linux

package vm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// kvmDevice is a variable so tests can stand in for /dev/kvm.
var kvmDevice = "/dev/kvm"

// kvmProbeTimeout bounds the KVM probe boot. A guest that boots under KVM
// reaches /init in well under this; one that does not may hang forever.
var kvmProbeTimeout = 15 * time.Second

// resolveAccel turns AccelAuto into KVM or TCG. /dev/kvm existing is not
// enough: some hypervisors expose it but cannot run an ordinary guest, so the
// first run boots a probe guest with KVM and caches what happened.
func resolveAccel(ctx context.Context, cfg Config, qemu string, k Kernel, initrd string) (Accel, error) {
	switch cfg.Accel {
	case AccelKVM, AccelTCG:
		return cfg.Accel, nil
	case "", AccelAuto:
	default:
		return "", fmt.Errorf("unknown accelerator %q (want auto, kvm or tcg)", cfg.Accel)
	}
	if unix.Access(kvmDevice, unix.R_OK|unix.W_OK) != nil {
		return AccelTCG, nil
	}
	st, _ := os.Stat(qemu)
	h := sha256.Sum256([]byte(fmt.Sprint(qemu, st.Size(), st.ModTime().UnixNano(), k.Image)))
	cache := filepath.Join(cfg.CacheDir, "accel-"+k.Version+"-"+hex.EncodeToString(h[:8]))
	if b, err := os.ReadFile(cache); err == nil {
		if a := Accel(strings.TrimSpace(string(b))); a == AccelKVM || a == AccelTCG {
			return a, nil
		}
	}
	a := AccelTCG
	if probeKVM(ctx, cfg, qemu, k, initrd) {
		a = AccelKVM
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	os.WriteFile(cache, []byte(string(a)+"\n"), 0o644)
	return a, nil
}

// probeKVM boots the guest under KVM with an init that only reports back.
func probeKVM(ctx context.Context, cfg Config, qemu string, k Kernel, initrd string) bool {
	dir, err := os.MkdirTemp("", "rxevm-probe-")
	if err != nil {
		return false
	}
	defer os.RemoveAll(dir)
	share := filepath.Join(dir, "share")
	if os.Mkdir(share, 0o755) != nil {
		return false
	}
	cfg.CPUs, cfg.Memory = 1, "256M"
	args := qemuArgs(cfg, AccelKVM, k, initrd, share, filepath.Join(dir, "console.log"), "rxevm.probe")
	pctx, cancel := context.WithTimeout(ctx, kvmProbeTimeout)
	defer cancel()
	var out bytes.Buffer
	runQEMU(pctx, qemu, args, &out)
	_, err = os.Stat(filepath.Join(share, "probe"))
	return err == nil
}
