//go:build linux

package vm

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Kernel is a bootable kernel image and the module tree that matches it.
type Kernel struct {
	Version string // uname -r, e.g. "6.1.0-56-amd64"
	Image   string // path to vmlinuz
	Modules string // /lib/modules/<Version>
}

// bootDir and modulesDir are variables so tests can point them at a fake tree.
var (
	bootDir    = "/boot"
	modulesDir = "/lib/modules"
)

// FindKernel resolves spec to a kernel. spec may be empty (the newest kernel
// in /boot whose modules are installed), a version ("6.1.0-56-amd64") or a
// path to a vmlinuz-<version> image.
func FindKernel(spec string) (Kernel, error) {
	if spec == "" {
		return newestKernel()
	}
	var k Kernel
	if strings.ContainsRune(spec, '/') {
		k.Image = spec
		k.Version = strings.TrimPrefix(filepath.Base(spec), "vmlinuz-")
	} else {
		k.Version = strings.TrimPrefix(spec, "vmlinuz-")
		k.Image = filepath.Join(bootDir, "vmlinuz-"+k.Version)
	}
	k.Modules = filepath.Join(modulesDir, k.Version)
	if _, err := os.Stat(k.Image); err != nil {
		return Kernel{}, fmt.Errorf("kernel %s: %w (install linux-image-amd64 or pass -kernel)", spec, pathErr(err))
	}
	if _, err := os.Stat(filepath.Join(k.Modules, "modules.dep")); err != nil {
		return Kernel{}, fmt.Errorf("kernel %s: no modules at %s: the image needs its matching /lib/modules tree", spec, k.Modules)
	}
	return k, nil
}

func newestKernel() (Kernel, error) {
	images, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	var best Kernel
	for _, img := range images {
		v := strings.TrimPrefix(filepath.Base(img), "vmlinuz-")
		mods := filepath.Join(modulesDir, v)
		if _, err := os.Stat(filepath.Join(mods, "modules.dep")); err != nil {
			continue
		}
		if best.Version == "" || versionLess(best.Version, v) {
			best = Kernel{Version: v, Image: img, Modules: mods}
		}
	}
	if best.Version == "" {
		return Kernel{}, fmt.Errorf("no kernel found: no %s/vmlinuz-* with modules in %s (apt-get install linux-image-amd64)", bootDir, modulesDir)
	}
	return best, nil
}

// versionLess orders kernel versions by their numeric fields, so that
// 6.1.0-10 sorts before 6.1.0-9's successor 6.1.0-56 and 6.10 after 6.9.
func versionLess(a, b string) bool {
	fa, fb := versionFields(a), versionFields(b)
	for i := 0; i < len(fa) && i < len(fb); i++ {
		na, ea := strconv.Atoi(fa[i])
		nb, eb := strconv.Atoi(fb[i])
		switch {
		case ea == nil && eb == nil && na != nb:
			return na < nb
		case (ea != nil || eb != nil) && fa[i] != fb[i]:
			return fa[i] < fb[i]
		}
	}
	return len(fa) < len(fb)
}

func versionFields(v string) []string {
	return strings.FieldsFunc(v, func(r rune) bool { return r == '.' || r == '-' || r == '+' || r == '~' })
}

// pathErr drops the *PathError wrapper when the path is already in the message.
func pathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
