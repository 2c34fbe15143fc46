package doctor

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/arbor-dev/arbor/internal/fusemount"
)

// host reads Host's file tree, parsing each file once.
type host struct {
	Host

	kernelDone bool
	release    string
	kv         version
	kvOK       bool

	mountsDone bool
	mountList  []fusemount.Mount

	configDone bool
	config     map[string]string // nil when /proc/config.gz cannot be read
}

// rel is p as a path in Root (no leading slash).
func rel(p string) string {
	p = strings.TrimPrefix(path.Clean("/"+p), "/")
	if p == "" {
		return "."
	}
	return p
}

func (h *host) read(p string) (string, error) {
	b, err := fs.ReadFile(h.Root, rel(p))
	return string(b), err
}

// readTrim is the file's content without surrounding space, or "".
func (h *host) readTrim(p string) string {
	s, err := h.read(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

func (h *host) stat(p string) (fs.FileInfo, error) { return fs.Stat(h.Root, rel(p)) }

func (h *host) exists(p string) bool {
	_, err := h.stat(p)
	return err == nil
}

func (h *host) root() bool { return h.UID == 0 }

// version is a kernel's major.minor.
type version struct{ major, minor int }

func (v version) atLeast(major, minor int) bool {
	return v.major > major || (v.major == major && v.minor >= minor)
}

// parseRelease reads the major.minor at the start of a kernel release.
func parseRelease(release string) (version, bool) {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return version{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minorDigits := parts[1]
	if i := strings.IndexFunc(minorDigits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorDigits = minorDigits[:i]
	}
	minor, err2 := strconv.Atoi(minorDigits)
	if err1 != nil || err2 != nil {
		return version{}, false
	}
	return version{major, minor}, true
}

// kernel is the running kernel's release and its version.
func (h *host) kernel() (release string, v version, ok bool) {
	if !h.kernelDone {
		h.kernelDone = true
		h.release = h.readTrim("/proc/sys/kernel/osrelease")
		h.kv, h.kvOK = parseRelease(h.release)
	}
	return h.release, h.kv, h.kvOK
}

// statusField is a field of /proc/self/status ("CapEff", "Seccomp"), or "".
func (h *host) statusField(name string) string {
	s, err := h.read("/proc/self/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

const capSysAdmin = 21

// hasSysAdmin reports whether this process has CAP_SYS_ADMIN, and whether
// that could be read.
func (h *host) hasSysAdmin() (has, known bool) {
	v, err := strconv.ParseUint(h.statusField("CapEff"), 16, 64)
	if err != nil {
		return false, false
	}
	return v&(1<<capSysAdmin) != 0, true
}

func (h *host) mounts() []fusemount.Mount {
	if !h.mountsDone {
		h.mountsDone = true
		if s, err := h.read("/proc/self/mountinfo"); err == nil {
			h.mountList, _ = fusemount.Parse(strings.NewReader(s))
		}
	}
	return h.mountList
}

// filesystem reports whether the kernel has a filesystem type registered
// (/proc/filesystems).
func (h *host) filesystem(name string) bool {
	s, err := h.read("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// kconfig is a kernel build option from /proc/config.gz ("y", "m", or ""
// when unset), and whether the configuration could be read at all.
func (h *host) kconfig(name string) (value string, known bool) {
	if !h.configDone {
		h.configDone = true
		h.config = readConfig(h.Root)
	}
	if h.config == nil {
		return "", false
	}
	return h.config[name], true
}

func readConfig(root fs.FS) map[string]string {
	f, err := root.Open("proc/config.gz")
	if err != nil {
		return nil
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return nil
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil
	}
	cfg := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			cfg[k] = v
		}
	}
	return cfg
}

// lookPath finds an executable name as exec.LookPath would on h.PATH, then
// in fallbackDir (go-fuse looks for fusermount3 in /bin when PATH lacks it).
func (h *host) lookPath(name, fallbackDir string) (string, fs.FileInfo, bool) {
	dirs := filepath.SplitList(h.PATH)
	if fallbackDir != "" {
		dirs = append(dirs, fallbackDir)
	}
	for _, dir := range dirs {
		if !filepath.IsAbs(dir) {
			continue // exec.LookPath refuses relative results too
		}
		p := filepath.Join(dir, name)
		fi, err := h.stat(p)
		if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, fi, true
		}
	}
	return "", nil, false
}

// owner is the uid and gid that own fi, when the file tree says.
func owner(fi fs.FileInfo) (uid, gid uint32, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st == nil {
		return 0, 0, false
	}
	return st.Uid, st.Gid, true
}

// describeMode is "mode 0600, owner root:root" or with numbers.
func describeMode(fi fs.FileInfo) string {
	s := fmt.Sprintf("mode %04o", fi.Mode().Perm())
	if uid, gid, ok := owner(fi); ok {
		s += ", owner " + idName(uid) + ":" + idName(gid)
	}
	return s
}

func idName(id uint32) string {
	if id == 0 {
		return "root"
	}
	return strconv.FormatUint(uint64(id), 10)
}
