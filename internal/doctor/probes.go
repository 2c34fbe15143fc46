package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SystemProbes are the probes of this machine.
func SystemProbes() Probes {
	return Probes{
		OpenDevice:  openDevice,
		Clone:       cloneProbe,
		LandlockABI: landlockABI,
		FSType:      fsType,
		Reflink:     reflink,
		Version:     commandVersion,
	}
}

func openDevice(path string) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// cloneProbe clones a child into the namespaces of flags and has it exec
// the empty path, which fails at once with ENOENT: the child never runs
// any code of ours (a forked Go process may run nothing but system calls),
// and needs no program on the host. An error from clone itself (EPERM,
// EINVAL, ENOSPC, EUSERS) means the namespaces cannot be made; ENOENT,
// which clone never returns, means they were made. ForkExec reaps the child.
func cloneProbe(flags uintptr) error {
	_, err := syscall.ForkExec("", []string{"arbor-doctor-probe"}, &syscall.ProcAttr{
		Sys: &syscall.SysProcAttr{Cloneflags: flags},
	})
	switch {
	case errors.Is(err, syscall.ENOENT):
		return nil
	case err == nil:
		return errors.New("clone probe: exec of the empty path succeeded")
	}
	return err
}

func landlockABI() (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

func fsType(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Type, nil
}

// reflink clones one temporary file of dir into another with FICLONE.
func reflink(dir string) (err error) {
	src, err := os.CreateTemp(dir, ".arbor-doctor-*")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, src.Close(), os.Remove(src.Name())) }()
	dst, err := os.CreateTemp(dir, ".arbor-doctor-*")
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dst.Close(), os.Remove(dst.Name())) }()
	if _, err := src.Write(bytes.Repeat([]byte("arbor"), 4096)); err != nil {
		return err
	}
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}

// commandVersion is the first line of `path --version`.
func commandVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "", fmt.Errorf("%s --version printed nothing", path)
	}
	return line, nil
}
