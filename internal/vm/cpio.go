package vm

import (
	"fmt"
	"io"
	"path"
)

// cpioWriter writes a newc ("070701") archive, the initramfs format.
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	err  error
	dirs map[string]bool // directories written
}

// Parents adds the directories above name not written yet.
func (c *cpioWriter) Parents(name string) {
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		if c.dirs[d] {
			break
		}
		c.Parents(d)
		c.Dir(d)
	}
}

func (c *cpioWriter) header(name string, mode, rdevMajor, rdevMinor uint32, size int) {
	if c.err != nil {
		return
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(h + name + "\x00"))
	c.pad(110 + len(name) + 1)
}

func (c *cpioWriter) write(b []byte) {
	if c.err == nil {
		_, c.err = c.w.Write(b)
	}
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// Dir adds a directory.
func (c *cpioWriter) Dir(name string) {
	if c.dirs[name] {
		return
	}
	if c.dirs != nil {
		c.dirs[name] = true
	}
	c.header(name, 0o040755, 0, 0, 0)
}

// File adds a regular file of mode perm with data.
func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.header(name, 0o100000|perm, 0, 0, len(data))
	c.write(data)
	c.pad(len(data))
}

// Symlink adds a symlink to target.
func (c *cpioWriter) Symlink(name, target string) {
	c.header(name, 0o120777, 0, 0, len(target))
	c.write([]byte(target))
	c.pad(len(target))
}

// CharDev adds a character device node.
func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.header(name, 0o020000|perm, major, minor, 0)
}

// Close writes the trailer.
func (c *cpioWriter) Close() error {
	c.ino = 0
	c.header("TRAILER!!!", 0, 0, 0, 0)
	return c.err
}
