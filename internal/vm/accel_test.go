//go:build linux

package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQEMU writes a qemu stand-in that, asked for KVM, behaves as mode says:
// "boots" reports back through the share as the probe guest's /init does,
// "fails" exits at once, "hangs" never returns. It logs each call.
func fakeQEMU(t *testing.T, mode string) (qemu, log string) {
	dir := t.TempDir()
	qemu, log = filepath.Join(dir, "qemu"), filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + log + `
share=$(echo "$*" | sed -n 's/.*local,path=\([^,]*\),mount_tag=rxevm.*/\1/p')
case "` + mode + `" in
boots) echo ok > "$share/probe" ;;
fails) exit 1 ;;
hangs) exec sleep 600 ;;
esac
`
	if err := os.WriteFile(qemu, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return qemu, log
}

func TestResolveAccel(t *testing.T) {
	oldDev, oldTimeout := kvmDevice, kvmProbeTimeout
	t.Cleanup(func() { kvmDevice, kvmProbeTimeout = oldDev, oldTimeout })
	kvmProbeTimeout = 500 * time.Millisecond
	fakeKVM := filepath.Join(t.TempDir(), "kvm")
	os.WriteFile(fakeKVM, nil, 0o666)
	k := Kernel{Version: "6.1.0-test", Image: "/boot/vmlinuz-test"}

	for _, tc := range []struct {
		mode string
		want Accel
	}{{"boots", AccelKVM}, {"fails", AccelTCG}, {"hangs", AccelTCG}} {
		t.Run(tc.mode, func(t *testing.T) {
			kvmDevice = fakeKVM
			qemu, log := fakeQEMU(t, tc.mode)
			cfg := Config{CacheDir: t.TempDir()}
			start := time.Now()
			a, err := resolveAccel(context.Background(), cfg, qemu, k, "/initrd")
			if err != nil || a != tc.want {
				t.Fatalf("resolveAccel = %v, %v; want %v", a, err, tc.want)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("probe took %v", d)
			}
			calls, _ := os.ReadFile(log)
			if !strings.Contains(string(calls), "-accel kvm") || !strings.Contains(string(calls), "rxevm.probe") {
				t.Errorf("probe did not boot a KVM probe guest: %s", calls)
			}
			// The outcome is cached: a second call does not probe again.
			os.Remove(log)
			if a2, _ := resolveAccel(context.Background(), cfg, qemu, k, "/initrd"); a2 != tc.want {
				t.Errorf("cached = %v", a2)
			}
			if _, err := os.Stat(log); err == nil {
				t.Error("probed again instead of using the cache")
			}
		})
	}

	t.Run("no-kvm-device", func(t *testing.T) {
		kvmDevice = filepath.Join(t.TempDir(), "absent")
		qemu, log := fakeQEMU(t, "boots")
		if a, err := resolveAccel(context.Background(), Config{CacheDir: t.TempDir()}, qemu, k, "/initrd"); a != AccelTCG || err != nil {
			t.Errorf("= %v, %v; want tcg", a, err)
		}
		if _, err := os.Stat(log); err == nil {
			t.Error("probed without a KVM device")
		}
	})
	t.Run("explicit", func(t *testing.T) {
		for _, a := range []Accel{AccelKVM, AccelTCG} {
			if got, err := resolveAccel(context.Background(), Config{Accel: a}, "/nonexistent", k, ""); got != a || err != nil {
				t.Errorf("%v: %v, %v", a, got, err)
			}
		}
		if _, err := resolveAccel(context.Background(), Config{Accel: "hvf"}, "", k, ""); err == nil {
			t.Error("accepted accel hvf")
		}
	})
}
