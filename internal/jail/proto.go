package jail

import (
	"encoding/json"
	"fmt"

	"golang.org/x/sys/unix"
)

// The protocol between a Sandbox and its init runs over one SOCK_SEQPACKET
// socketpair: every message is one JSON object in one packet, with the
// file descriptors it carries (stdio, a cgroup, a pty master) as
// SCM_RIGHTS. Packets keep their boundaries, so no framing is needed,
// and the fds travel with the message that names them.

// Message ops.
const (
	opPrepare  = "prepare"  // host -> init: the skeleton to build (the gate: init waits for it)
	opPrepared = "prepared" // init -> host: the skeleton is built (a failure comes as ready with Err)
	opSetup    = "setup"    // host -> init: the node's directories, to finish the root with
	opReady    = "ready"    // init -> host: the sandbox is up, or Err says why not
	opExec     = "exec"     // host -> init: start a process (fds: stdin, stdout, stderr; then the cgroup dir)
	opStarted  = "started"  // init -> host: ID's process runs as Pid (fds: the pty master), or Err
	opExit     = "exit"     // init -> host: ID's process ended with Status (a wait status)
	opSignal   = "signal"   // host -> init: send Signal to ID's process group
)

// msg is every message; each op uses the fields it names.
type msg struct {
	Op  string `json:"op"`
	ID  uint64 `json:"id,omitempty"`
	Err string `json:"err,omitempty"`

	// setup
	Setup *setup `json:"setup,omitempty"`

	// exec
	Argv   []string `json:"argv,omitempty"`
	Env    []string `json:"env,omitempty"`
	Cwd    string   `json:"cwd,omitempty"`
	TTY    bool     `json:"tty,omitempty"`
	Rows   uint16   `json:"rows,omitempty"`
	Cols   uint16   `json:"cols,omitempty"`
	Cgroup bool     `json:"cgroup,omitempty"` // the last fd is the exec's cgroup2 directory

	// started, exit, signal
	Pid    int    `json:"pid,omitempty"`
	Status uint32 `json:"status,omitempty"`
	Signal int    `json:"signal,omitempty"`

	// debug step stamps (trace.go): asked for by Trace, sent back by init
	Trace      bool     `json:"trace,omitempty"`
	TraceSteps []string `json:"trace_steps,omitempty"`
	TraceNS    []int64  `json:"trace_ns,omitempty"`
}

// setup is what init needs to build the sandbox: Mountpoint and HostDirs
// in prepare (the same for every sandbox of a manager, so a spare has
// them), the rest in setup.
type setup struct {
	Mountpoint string   `json:"mountpoint,omitempty"` // an empty host directory for the new root's tmpfs
	HostDirs   []string `json:"host_dirs,omitempty"`  // top-level host paths bound read-only (or copied as symlinks)
	RootDir    string   `json:"root_dir,omitempty"`   // where HostDirs are taken from: an image's root (default /)
	Workspace  string   `json:"workspace,omitempty"`
	Tmp        string   `json:"tmp,omitempty"`
	Hostname   string   `json:"hostname,omitempty"`
}

// maxPacket bounds one message: argv and env of an exec are the big ones.
const maxPacket = 1 << 20

func send(fd int, m *msg, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > maxPacket {
		return fmt.Errorf("message of %d bytes is over %d", len(b), maxPacket)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err = unix.Sendmsg(fd, b, oob, nil, 0)
		if err != unix.EINTR {
			return err
		}
	}
}

// recv reads one message; fds it carried are returned open (the caller
// owns them). io.EOF-like end is (nil, nil, nil).
func recv(fd int, buf, oob []byte) (*msg, []int, error) {
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, nil, err
	}
	var fds []int
	if oobn > 0 {
		cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, err
		}
		for _, c := range cmsgs {
			got, err := unix.ParseUnixRights(&c)
			if err != nil {
				closeAll(fds)
				return nil, nil, err
			}
			fds = append(fds, got...)
		}
	}
	if n == 0 {
		closeAll(fds)
		return nil, nil, nil
	}
	var m msg
	if err := json.Unmarshal(buf[:n], &m); err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("bad message: %w", err)
	}
	return &m, fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
