package doctor

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
)

// Status is the verdict on one capability.
type Status string

const (
	// OK: Arbor gets from it what it needs.
	OK Status = "ok"
	// Warn: present but limited, or absent where Arbor works around it (at
	// a cost the detail names).
	Warn Status = "warn"
	// Missing: not there (or not usable by this user); what needs it does
	// not work.
	Missing Status = "missing"
)

// Check is one capability's line. Its JSON field names are stable.
type Check struct {
	// Name identifies the capability: kernel, root, dev_fuse, ... (Names).
	Name string `json:"name"`
	// Status is ok, warn or missing.
	Status Status `json:"status"`
	// Detail says what was found and what it means for Arbor.
	Detail string `json:"detail"`
	// Fix says how to get the capability; empty when there is nothing to do.
	Fix string `json:"fix"`

	blocks bool // the default backend cannot run without it
}

// DefaultBackend is the backend a tree gets when it names none.
const DefaultBackend = "dir"

// Report is the whole diagnosis. Its JSON field names are stable.
type Report struct {
	// DefaultBackend is the backend whose needs decide Runs ("dir").
	DefaultBackend string `json:"default_backend"`
	// Runs reports whether the default backend can run on this host.
	Runs bool `json:"default_backend_runs"`
	// BlockedBy names the checks that keep the default backend from running.
	BlockedBy []string `json:"blocked_by"`
	// Checks has one entry per capability, in the order of Names.
	Checks []Check `json:"checks"`
}

// Host is what the checks read: the host's file tree and the probes that
// need a system call.
type Host struct {
	// Root is the host's file tree, as os.DirFS("/") gives it: paths have
	// no leading slash ("proc/self/status", "dev/fuse").
	Root fs.FS
	// UID is the effective uid the daemon would run as.
	UID int
	// Home is $ARBOR_HOME, absolute.
	Home string
	// PATH is the search path for fusermount3 and qemu-system-x86_64.
	PATH string
	// Probe makes the system calls.
	Probe Probes
}

// Probes are the checks' system calls, each one function so that a test can
// replace any of them.
type Probes struct {
	// OpenDevice opens the device at path read-write and closes it again.
	OpenDevice func(path string) error
	// Clone starts a child in new namespaces (CLONE_NEW* flags) and reaps it.
	Clone func(flags uintptr) error
	// LandlockABI is landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION).
	LandlockABI func() (int, error)
	// FSType is statfs(2)'s f_type for dir.
	FSType func(dir string) (int64, error)
	// Reflink makes two temporary files in dir, clones one into the other
	// with FICLONE and removes both.
	Reflink func(dir string) error
	// Version runs `path --version` and returns the first line it prints.
	Version func(ctx context.Context, path string) (string, error)
}

// SystemHost is this machine as the user running the command sees it. PATH
// is read from the environment, as the daemon's FUSE library (exec.LookPath)
// reads it to find fusermount3.
func SystemHost(home string) Host {
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	return Host{Root: os.DirFS("/"), UID: os.Geteuid(), Home: home, PATH: os.Getenv("PATH"), Probe: SystemProbes()}
}

// Names are the checks Run makes, in its order.
func Names() []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.name
	}
	return names
}

// checks is the one list of capabilities: Run, Names and the text output
// follow it.
var checks = []struct {
	name string
	run  func(ctx context.Context, h *host) Check
}{
	{"kernel", checkKernel},
	{"root", checkRoot},
	{"dev_fuse", checkDevFuse},
	{"fusermount3", checkFusermount},
	{"fuse_passthrough", checkPassthrough},
	{"fusectl", checkFusectl},
	{"fuse_io_uring", checkIOUring},
	{"cgroup", checkCgroup},
	{"ns_user", checkNamespace(nsUser)},
	{"ns_pid", checkNamespace(nsPID)},
	{"ns_net", checkNamespace(nsNet)},
	{"ns_mount", checkNamespace(nsMount)},
	{"landlock", checkLandlock},
	{"seccomp", checkSeccomp},
	{"kvm", checkKVM},
	{"qemu", checkQEMU},
	{"mmdebstrap", checkMmdebstrap},
	{"pasta", checkPasta},
	{"reflink", checkReflink},
	{"open_files", checkOpenFiles},
	{"protected_hardlinks", checkProtectedHardlinks},
}

// Run checks every capability of h. It changes nothing on the host but for
// the reflink probe's two temporary files, which it removes.
func Run(ctx context.Context, h Host) Report {
	hh := &host{Host: h}
	r := Report{DefaultBackend: DefaultBackend, BlockedBy: []string{}}
	for _, c := range checks {
		ch := c.run(ctx, hh)
		ch.Name = c.name
		if ch.blocks {
			r.BlockedBy = append(r.BlockedBy, c.name)
		}
		r.Checks = append(r.Checks, ch)
	}
	r.Runs = len(r.BlockedBy) == 0
	return r
}

// Summary is the report's last line: whether the default backend runs.
func (r Report) Summary() string {
	if r.Runs {
		return fmt.Sprintf("default backend %s (files over FUSE): can run", r.DefaultBackend)
	}
	return fmt.Sprintf("default backend %s (files over FUSE): cannot run (%s)", r.DefaultBackend, strings.Join(r.BlockedBy, ", "))
}

// WriteText writes one line per capability (status, name, detail and fix),
// then the summary.
func (r Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range r.Checks {
		line := c.Detail
		if c.Fix != "" {
			line += ". Fix: " + c.Fix
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.Status, c.Name, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, r.Summary())
	return err
}

// WriteJSON writes the report as one indented JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // fixes hold shell redirections: "echo Y > ..."
	return enc.Encode(r)
}

const usage = `usage: arbor doctor [-o json]

Checks what this host can do for Arbor: one line per capability (ok, warn or
missing), what it means for Arbor, and how to fix it. Exits 1 when the
default backend (dir: files over FUSE) cannot run here. Starts no daemon.

  -o json   one JSON object: default_backend, default_backend_runs,
            blocked_by, and checks (each with name, status, detail, fix)
`

// Main is `arbor doctor`: it checks SystemHost(home) and returns the exit
// code (0, 1 when the default backend cannot run, 2 on a usage error).
func Main(ctx context.Context, args []string, home string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fset.SetOutput(io.Discard)
	out := fset.String("o", "", "output format: json")
	if err := fset.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "arbor doctor: %v\n%s", err, usage)
		return 2
	}
	switch {
	case fset.NArg() > 0:
		fmt.Fprintf(stderr, "arbor doctor: unexpected argument %q\n%s", fset.Arg(0), usage)
		return 2
	case *out != "" && *out != "json" && *out != "text":
		fmt.Fprintf(stderr, "arbor doctor: -o takes json or text, not %q\n%s", *out, usage)
		return 2
	}
	r := Run(ctx, SystemHost(home))
	var err error
	if *out == "json" {
		err = r.WriteJSON(stdout)
	} else {
		err = r.WriteText(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "arbor doctor: %v\n", err)
		return 1
	}
	if !r.Runs {
		return 1
	}
	return 0
}
