package daemon

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// A daemon killed with SIGKILL can stay alive, holding its lock, while one
// of its threads waits in the kernel: a FUSE invalidation waits for a
// directory lock that a client holds while it waits for an answer the dead
// server will never send. Aborting the mounts' FUSE connections ends the
// wait; the kernel does it only when the process has exited. So a new
// daemon whose lock is held by a dying one (SIGKILL pending) aborts the
// connections of the mounts under its home (the trees' and those in
// mounts.json), and takes the lock once the old one is gone.

// lockHeld takes the home's lock, freeing it from a dying daemon if need be,
// waiting up to wait for it to go.
func lockHeld(lock *os.File, home string, ab *fusemount.Aborter, wait time.Duration) error {
	fd := int(lock.Fd())
	deadline := time.Now().Add(wait)
	aborted := false
	var abortErr error
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		pid, ok := lockHolder(lock)
		if !ok || !(dying(pid) || exited(pid)) || time.Now().After(deadline) {
			if abortErr != nil {
				return fmt.Errorf("%w (the dying daemon %d holds it: %w)", err, pid, abortErr)
			}
			return err
		}
		if !aborted {
			abortErr = abortMounts(home, ab)
			aborted = true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockHolder is the pid holding a flock on f, from /proc/locks.
func lockHolder(f *os.File) (int, bool) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return 0, false
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, false
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"
	want := fmt.Sprintf(":%d", st.Ino)
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[1] != "FLOCK" || !strings.HasSuffix(fs[5], want) {
			continue
		}
		if pid, err := strconv.Atoi(fs[4]); err == nil && pid != os.Getpid() {
			return pid, true
		}
	}
	return 0, false
}

// dying reports whether pid has SIGKILL pending (it is being killed).
func dying(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
			return true
		}
	}
	return false
}

// exited reports whether pid has exited (gone, or a zombie). A lock whose
// taker exited is held by a child that inherited the lock's descriptor:
// one the daemon was forking when it was killed (a sandbox's init, between
// its fork and its exec, which closes the descriptor; its Pdeathsig kills
// it first). It goes within moments.
func exited(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// abortMounts aborts the FUSE connections of the mounts under home and of
// the views the daemon of home made elsewhere.
func abortMounts(home string, ab *fusemount.Aborter) error {
	ms, err := fusemount.List()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range ms {
		if m.FSType != "fuse.branchfs" {
			continue
		}
		// Under the home (the trees' own mounts), or made by the daemon
		// of this home anywhere (its views: see workspace.MountSource).
		owner, _, ours := workspace.ParseSource(m.Source)
		if fusemount.Within(m.Point, home) || (ours && filepath.Clean(owner) == filepath.Clean(home)) {
			errs = append(errs, ab.Abort(m))
		}
	}
	return errors.Join(errs...)
}
