//go:build linux

package vm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// bootModules are what /init needs before it can reach the host root: the
// virtio PCI transport, 9p over virtio, and overlayfs. Everything else (rxe,
// veth, ...) is loaded later from the host's module tree with modprobe.
var bootModules = []string{"virtio_pci", "9pnet_virtio", "9p", "overlay"}

// busyboxPath is the statically linked busybox that /init runs on.
var busyboxPath = "/bin/busybox"

// initScript mounts the host root read-only over 9p, lays a tmpfs overlay on
// it so the guest root is writable but leaves no trace, and hands over to the
// guest agent, which the host placed in the read-write share.
const initScript = `#!/bin/busybox sh
bb=/bin/busybox
$bb mkdir -p /proc /dev /lower /rw /root /share
$bb mount -t proc proc /proc
$bb mount -t devtmpfs dev /dev
fail() {
	echo "rxevm-init: $*" >/dev/ttyS0
	[ -w /share ] && echo "init: $*" >/share/init-error
	$bb poweroff -f
}
for m in $($bb cat /modules); do $bb insmod /mod/$m || fail "insmod $m failed"; done
opts=trans=virtio,version=9p2000.L,msize=262144
$bb mount -t 9p -o $opts rxevm /share || fail "cannot mount the run share"
$bb mount -t 9p -o $opts,ro hostroot /lower || fail "cannot mount the host root"
$bb mount -t tmpfs -o mode=0755 rw /rw && $bb mkdir /rw/upper /rw/work
$bb mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /root || fail "cannot mount the overlay root"
$bb mount -t tmpfs -o mode=0755 run /root/run || fail "cannot mount /run"
$bb mkdir -p /root/run/rxevm
$bb mount --move /share /root/run/rxevm
$bb mount --move /dev /root/dev
$bb mount --move /proc /root/proc
$bb grep -q rxevm.probe /root/proc/cmdline && { echo ok >/root/run/rxevm/probe; $bb poweroff -f; }
exec $bb switch_root /root /run/rxevm/agent ` + agentFlag + `
`

// Initramfs returns the path of a cached initramfs for k, building it when
// the cache has none for this kernel, busybox and module set.
func Initramfs(k Kernel, cacheDir string) (string, error) {
	mods, err := resolveModules(k)
	if err != nil {
		return "", err
	}
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("busybox: %w (apt-get install busybox-static)", pathErr(err))
	}
	h := sha256.New()
	h.Write(bb)
	h.Write([]byte(initScript))
	for _, m := range mods {
		fmt.Fprintln(h, m)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	path := filepath.Join(cacheDir, "initramfs-"+k.Version+"-"+key+".cpio")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}

	var buf bytes.Buffer
	cw := &cpioWriter{w: &buf}
	cw.Dir("bin", 0o755)
	cw.File("bin/busybox", 0o755, bb)
	cw.Dir("mod", 0o755)
	var order []string
	for _, m := range mods {
		data, err := readModule(m)
		if err != nil {
			return "", err
		}
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(m), ".xz"), ".zst")
		cw.File("mod/"+name, 0o644, data)
		order = append(order, name)
	}
	cw.File("modules", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	cw.File("init", 0o755, []byte(initScript))
	if err := cw.Close(); err != nil {
		return "", err
	}

	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("cache directory %s: %w", cacheDir, pathErr(err))
	}
	tmp, err := os.CreateTemp(cacheDir, ".initramfs-*")
	if err != nil {
		return "", fmt.Errorf("cache directory %s is not writable: %w", cacheDir, pathErr(err))
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return "", fmt.Errorf("writing initramfs: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", err
	}
	return path, nil
}

// resolveModules lists, in load order and without repeats, the module files
// that bootModules need, as modprobe computes them for kernel k.
func resolveModules(k Kernel) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	for _, name := range bootModules {
		cmd := exec.Command("modprobe", "-d", moduleRoot(k), "-S", k.Version, "--show-depends", name)
		cmd.Env = append(os.Environ(), "PATH=/usr/sbin:/sbin:"+os.Getenv("PATH"))
		outb, err := cmd.Output()
		if err != nil {
			var msg string
			if ee, ok := err.(*exec.ExitError); ok {
				msg = strings.TrimSpace(string(ee.Stderr))
			} else {
				msg = err.Error() + " (apt-get install kmod)"
			}
			return nil, fmt.Errorf("resolving module %s for kernel %s: %s", name, k.Version, msg)
		}
		sc := bufio.NewScanner(bytes.NewReader(outb))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			// "builtin NAME" needs no file; "insmod PATH [params]" does.
			if len(f) < 2 || f[0] != "insmod" || seen[f[1]] {
				continue
			}
			seen[f[1]] = true
			out = append(out, f[1])
		}
	}
	return out, nil
}

// readModule returns a module's bytes, decompressing .ko.xz and .ko.zst with
// the host's tools because the initramfs's insmod is not relied on for that.
func readModule(path string) ([]byte, error) {
	var cmd *exec.Cmd
	switch {
	case strings.HasSuffix(path, ".xz"):
		cmd = exec.Command(busyboxPath, "unxz", "-c", path)
	case strings.HasSuffix(path, ".zst"):
		cmd = exec.Command("zstd", "-dc", path)
	default:
		return os.ReadFile(path)
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("decompressing %s: %w", path, err)
	}
	return out, nil
}

// moduleRoot is the directory modprobe -d wants: the one holding lib/modules.
func moduleRoot(k Kernel) string {
	return filepath.Dir(filepath.Dir(filepath.Dir(k.Modules)))
}
