package cowfs

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/arbor-dev/arbor/api"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Without root a FUSE mount needs the setuid helper fusermount3. go-fuse
// calls it with the daemon's own stderr, so the only reason a user ever
// saw for a failure was "fusermount exited with code 256" (the cause,
// "fusermount3: failed to open /dev/fuse: Permission denied", went to the
// daemon's log). We call it ourselves, as go-fuse would, keep its stderr
// for the error, and hand go-fuse the descriptor it passes back (go-fuse's
// /dev/fd/N mountpoint); unmounting is then ours too (fusermountUnmount).

// fusermountBin finds fusermount3 (or fusermount), as go-fuse does.
func fusermountBin() (string, error) {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		if p := "/bin/" + name; isExec(p) {
			return p, nil
		}
	}
	return "", api.Errorf(api.ErrUnavailable,
		"mounting without root needs fusermount3, which is not installed (Debian: apt-get install fuse3)")
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// mountOptions is the -o argument go-fuse would give fusermount for o.
func mountOptions(o *fuse.MountOptions) string {
	esc := strings.NewReplacer(`\`, `\\`, `,`, `\,`)
	var r []string
	r = append(r, o.Options...)
	if o.AllowOther {
		r = append(r, "allow_other")
	}
	if o.FsName != "" {
		r = append(r, "fsname="+o.FsName)
	}
	if o.Name != "" {
		r = append(r, "subtype="+o.Name)
	}
	r = append(r, "max_read="+strconv.Itoa(o.MaxWrite))
	for i := range r {
		r[i] = esc.Replace(r[i])
	}
	return strings.Join(r, ",")
}

// fusermountMount mounts a FUSE filesystem at mp through fusermount3 and
// returns the /dev/fuse descriptor it passes back. A failure wraps
// api.ErrUnavailable and carries fusermount3's own words.
func fusermountMount(mp string, o *fuse.MountOptions) (int, error) {
	bin, err := fusermountBin()
	if err != nil {
		return -1, err
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("mount %s: socketpair: %w", mp, err)
	}
	local, remote := os.NewFile(uintptr(fds[0]), "fusermount-local"), os.NewFile(uintptr(fds[1]), "fusermount-remote")
	defer local.Close()
	defer remote.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(bin, mp, "-o", mountOptions(o))
	cmd.Env = []string{"_FUSE_COMMFD=3"}
	cmd.ExtraFiles = []*os.File{remote} // fd 3
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		why := strings.TrimSpace(stderr.String())
		if why == "" {
			why = err.Error()
		}
		return -1, fmt.Errorf("mount %s: %s: %w", mp, why, api.ErrUnavailable)
	}
	remote.Close()
	fd, err := receiveFD(local)
	if err != nil {
		return -1, fmt.Errorf("mount %s: %s passed no descriptor back: %w", mp, bin, err)
	}
	return fd, nil
}

// receiveFD reads the one descriptor fusermount sends over the socket.
func receiveFD(local *os.File) (int, error) {
	conn, err := net.FileConn(local)
	if err != nil {
		return -1, err
	}
	defer conn.Close()
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return -1, errors.New("not a unix socket")
	}
	var data [4]byte
	oob := make([]byte, syscall.CmsgSpace(4))
	_, oobn, _, _, err := uc.ReadMsgUnix(data[:], oob)
	if err != nil {
		return -1, err
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	if len(msgs) != 1 {
		return -1, fmt.Errorf("%d control messages, want 1", len(msgs))
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil {
		return -1, err
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return -1, fmt.Errorf("%d descriptors, want 1", len(fds))
	}
	return fds[0], nil
}

// fusermountUnmount unmounts mp through fusermount3 (lazily: detached now,
// gone when the last user leaves); its stderr is the error (EBUSY shows as
// "Device or resource busy").
func fusermountUnmount(mp string, lazy bool) error {
	bin, err := fusermountBin()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	args := []string{"-u", mp}
	if lazy {
		args = []string{"-u", "-z", mp}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		why := strings.TrimSpace(stderr.String())
		if why == "" {
			why = err.Error()
		}
		// fusermount3 exits 1 whatever failed; only its words tell a busy
		// mount (strerror(EBUSY)) from the rest.
		if strings.Contains(strings.ToLower(why), unix.EBUSY.Error()) {
			return fmt.Errorf("%s: %s: %w", bin, why, unix.EBUSY)
		}
		return fmt.Errorf("%s: %s", bin, why)
	}
	return nil
}
