package vm

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// includeSkip are directory names an included tree leaves out: test
// suites and GUI toolkits a guest has no use for (and config-*, a Python's
// static libraries for building extensions). The initramfs is the guest's
// root in its RAM (a tmpfs of half of it), so what it holds counts.
var includeSkip = map[string]bool{"test": true, "tests": true, "idlelib": true, "tkinter": true, "turtledemo": true, "ensurepip": true, "lib2to3": true}

// included is one host path copied into the guest.
type included struct {
	path  string
	dir   bool
	link  string // a symlink's target
	mode  uint32
	size  int64
	mtime int64
}

// collectIncludes lists what paths bring into the guest: every file under
// them (includeSkip aside), symlinks as symlinks (and their targets), and
// the shared libraries and loader of every ELF file among them.
func collectIncludes(paths []string) ([]included, error) {
	seen := map[string]bool{}
	var out []included
	var elfs []string
	var add func(p string) error
	add = func(p string) error {
		p = filepath.Clean(p)
		if seen[p] {
			return nil
		}
		seen[p] = true
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, included{path: p, link: t})
			if !filepath.IsAbs(t) {
				t = filepath.Join(filepath.Dir(p), t)
			}
			return add(t)
		case fi.IsDir():
			out = append(out, included{path: p, dir: true})
			ents, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if e.IsDir() && (includeSkip[e.Name()] || strings.HasPrefix(e.Name(), "config-")) {
					continue
				}
				if err := add(filepath.Join(p, e.Name())); err != nil {
					return err
				}
			}
		case fi.Mode().IsRegular():
			out = append(out, included{path: p, mode: uint32(fi.Mode().Perm()), size: fi.Size(), mtime: fi.ModTime().UnixNano()})
			if isELF(p) {
				elfs = append(elfs, p)
			}
		}
		return nil
	}
	for _, p := range paths {
		if err := add(p); err != nil {
			return nil, err
		}
	}
	for _, e := range elfs {
		libs, err := sharedLibs(e)
		if err != nil {
			return nil, err
		}
		for _, l := range libs {
			if err := add(l); err != nil {
				return nil, err
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out, nil
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	b := make([]byte, 4)
	_, err = f.Read(b)
	return err == nil && bytes.Equal(b, []byte("\x7fELF"))
}

// sharedLibs is what ldd says p needs: libraries and the loader.
func sharedLibs(p string) ([]string, error) {
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		// "not a dynamic executable": a static one, nothing needed.
		return nil, nil
	}
	var libs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0])
		case len(f) >= 2 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("%s: %s not found", p, f[0])
		}
	}
	return libs, nil
}

// PythonInclude is Config.Include for a guest with the host's python3
// (Debian's: /usr/bin/python3 and its standard library), or nil where the
// host has none.
func PythonInclude() []string {
	exe, err := filepath.EvalSymlinks("/usr/bin/python3")
	if err != nil {
		return nil
	}
	lib := filepath.Join("/usr/lib", filepath.Base(exe)) // python3.11 -> /usr/lib/python3.11
	if _, err := os.Stat(filepath.Join(lib, "os.py")); err != nil {
		return nil
	}
	return []string{"/usr/bin/python3", lib}
}
