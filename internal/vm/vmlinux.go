//go:build linux

package vm

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// bootImage returns the image qemu should boot for k. Under TCG the kernel's
// own XZ decompression costs about 3.5 s of every boot, so when the kernel
// supports PVH entry (Debian's do) qemu boots the uncompressed ELF vmlinux
// instead, extracted once and cached. Any failure falls back to the bzImage.
func bootImage(k Kernel, cacheDir string) string {
	st, err := os.Stat(k.Image)
	if err != nil {
		return k.Image
	}
	h := sha256.Sum256([]byte(fmt.Sprint(k.Image, st.Size(), st.ModTime().UnixNano())))
	path := filepath.Join(cacheDir, "vmlinux-"+k.Version+"-"+hex.EncodeToString(h[:8]))
	if _, err := os.Stat(path); err == nil {
		return path
	}
	if !hasPVH(k) {
		return k.Image
	}
	img, err := os.ReadFile(k.Image)
	if err != nil {
		return k.Image
	}
	elf, err := extractVmlinux(img)
	if err != nil {
		return k.Image
	}
	tmp, err := os.CreateTemp(cacheDir, ".vmlinux-*")
	if err != nil {
		return k.Image
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(elf)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		return k.Image
	}
	return path
}

// hasPVH reports whether the kernel's config (beside it in /boot) says it
// has the PVH entry point qemu needs to boot an ELF vmlinux.
func hasPVH(k Kernel) bool {
	cfg, err := os.ReadFile(filepath.Join(filepath.Dir(k.Image), "config-"+k.Version))
	return err == nil && bytes.Contains(cfg, []byte("\nCONFIG_PVH=y\n"))
}

// extractVmlinux finds the compressed payload in a bzImage and decompresses
// it. XZ (Debian's choice) needs the xz tool: its x86 BCJ filter is beyond
// busybox's unxz. gzip is handled in process.
func extractVmlinux(img []byte) ([]byte, error) {
	elfMagic := []byte("\x7fELF")
	if i := bytes.Index(img, []byte("\xfd7zXZ\x00")); i >= 0 {
		cmd := exec.Command("xz", "-dc", "--single-stream")
		cmd.Stdin = bytes.NewReader(img[i:])
		out, err := cmd.Output()
		if err == nil && bytes.HasPrefix(out, elfMagic) {
			return out, nil
		}
	}
	if i := bytes.Index(img, []byte("\x1f\x8b\x08\x00")); i >= 0 {
		zr, err := gzip.NewReader(bytes.NewReader(img[i:]))
		if err == nil {
			zr.Multistream(false)
			out, err := io.ReadAll(zr)
			if err == nil && bytes.HasPrefix(out, elfMagic) {
				return out, nil
			}
		}
	}
	return nil, fmt.Errorf("no decompressible vmlinux in the image")
}
