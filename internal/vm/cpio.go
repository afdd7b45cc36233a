//go:build linux

package vm

import (
	"fmt"
	"io"
)

// cpioWriter writes the SVR4 "newc" cpio format the kernel unpacks as an
// initramfs (Documentation/driver-api/early-userspace/buffer-format.rst).
// Only what an initramfs needs: directories, regular files, symlinks.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	off int64
	err error
}

const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioLink = 0o120000
)

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

// Dir adds a directory with permission bits perm.
func (c *cpioWriter) Dir(name string, perm uint32) { c.entry(name, cpioDir|perm, nil) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, cpioFile|perm, data)
}

// Symlink adds a symbolic link name -> target.
func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, cpioLink|0o777, []byte(target))
}

// Close writes the trailer and reports the first error.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, nil)
	return c.err
}
