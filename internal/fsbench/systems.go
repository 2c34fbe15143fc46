package fsbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/internal/fusemount"
	"golang.org/x/sys/unix"
)

// Baselines returns the built-in systems: native, kernel overlayfs and
// fuse-overlayfs. The ones this machine cannot run are skipped by Run.
func Baselines() []System {
	return []System{NewNative(), NewOverlay(), NewFuseOverlay()}
}

// NewNative returns the baseline: the base directory itself, no layer.
func NewNative() System { return native{} }

type native struct{}

func (native) Name() string { return Baseline }

func (native) Setup(ctx context.Context, base, scratch string) (string, error) { return base, nil }

func (native) Teardown(ctx context.Context) error { return nil }

// NewOverlay returns kernel overlayfs with the base as its only lower
// layer (root only). Its Branch mounts a fresh overlay over the base, the
// kernel's equivalent of a branch create; it cannot commit.
func NewOverlay() System { return &overlay{name: "overlayfs"} }

// NewFuseOverlay returns the fuse-overlayfs program (Debian package
// fuse-overlayfs) with the base as its only lower layer, run in the
// foreground as a child process per mount. Branch works as for overlayfs.
func NewFuseOverlay() System { return &overlay{name: "fuse-overlayfs", fuse: true} }

// overlay is kernel overlayfs or fuse-overlayfs. It is not safe for
// concurrent use: the harness drives one system at a time.
type overlay struct {
	name    string
	fuse    bool
	base    string
	scratch string
	n       int // mounts made, for directory names
	root    *ovMount
	// live are the mounts not yet unmounted, the root and the branches.
	live map[*ovMount]bool
}

type ovMount struct {
	dir  string // holds upper, work, merged
	mnt  string // merged
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	out  bytes.Buffer  // cmd's output, read after done
}

func (o *overlay) Name() string { return o.name }

func (o *overlay) Setup(ctx context.Context, base, scratch string) (string, error) {
	if err := o.available(); err != nil {
		return "", err
	}
	if strings.ContainsAny(base+scratch, ",:\\") {
		return "", fmt.Errorf("%s: paths with ',', ':' or '\\' are not supported: %s, %s", o.name, base, scratch)
	}
	o.base, o.scratch, o.live = base, scratch, map[*ovMount]bool{}
	m, err := o.mount(ctx)
	if err != nil {
		return "", err
	}
	o.root = m
	return m.mnt, nil
}

func (o *overlay) available() error {
	if !o.fuse {
		if !isRoot() {
			return fmt.Errorf("overlayfs needs root: %w", errors.ErrUnsupported)
		}
		return nil // a kernel without overlayfs fails the mount with ENODEV
	}
	if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
		return fmt.Errorf("fuse-overlayfs is not installed (apt-get install fuse-overlayfs): %w", errors.ErrUnsupported)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", errors.ErrUnsupported)
	}
	if !isRoot() {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			return fmt.Errorf("fuse-overlayfs as a user needs fusermount3 (apt-get install fuse3): %w", errors.ErrUnsupported)
		}
	}
	return nil
}

// mount makes a new overlay over the base in a new directory of scratch.
func (o *overlay) mount(ctx context.Context) (*ovMount, error) {
	o.n++
	m := &ovMount{dir: filepath.Join(o.scratch, fmt.Sprintf("ov%d", o.n))}
	m.mnt = filepath.Join(m.dir, "merged")
	upper, work := filepath.Join(m.dir, "upper"), filepath.Join(m.dir, "work")
	for _, d := range []string{m.dir, upper, work, m.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = removeAll(m.dir)
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
	}
	opts := "lowerdir=" + o.base + ",upperdir=" + upper + ",workdir=" + work
	if !o.fuse {
		if err := unix.Mount("overlay", m.mnt, "overlay", 0, opts); err != nil {
			_ = removeAll(m.dir)
			if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w: %w", err, errors.ErrUnsupported)
			}
			return nil, fmt.Errorf("mount overlay on %s: %w", m.mnt, err)
		}
		o.live[m] = true
		return m, nil
	}
	// Foreground, so the process is our child and Teardown can wait for
	// it; the mount is ready when it shows in mountinfo.
	m.cmd = exec.Command("fuse-overlayfs", "-f", "-o", opts, m.mnt)
	m.cmd.Stdout, m.cmd.Stderr = &m.out, &m.out
	if err := m.cmd.Start(); err != nil {
		_ = removeAll(m.dir)
		return nil, fmt.Errorf("start fuse-overlayfs: %w", err)
	}
	m.done = make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(m.done) }()
	o.live[m] = true
	if err := fusemount.Wait(ctx, m.mnt, 10*time.Second, m.done); err != nil {
		uerr := o.unmount(context.Background(), m)
		return nil, fmt.Errorf("fuse-overlayfs: %w (output: %s)", errors.Join(err, uerr), m.output())
	}
	return m, nil
}

func (m *ovMount) output() string {
	select {
	case <-m.done:
		return strings.TrimSpace(m.out.String())
	default:
		return "(still running)"
	}
}

// unmount unmounts m, waits for its process and removes its directory.
func (o *overlay) unmount(ctx context.Context, m *ovMount) error {
	err := unmount(ctx, m.mnt)
	if m.cmd != nil {
		select {
		case <-m.done:
		case <-time.After(5 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.done
			if err == nil {
				err = fmt.Errorf("fuse-overlayfs on %s did not exit after unmount; killed", m.mnt)
			}
		}
	}
	delete(o.live, m)
	if rerr := removeAll(m.dir); err == nil && rerr != nil && !isMounted(m.mnt) {
		err = rerr
	}
	return err
}

func (o *overlay) Teardown(ctx context.Context) error {
	var errs []error
	for m := range o.live {
		if m != o.root {
			errs = append(errs, o.unmount(ctx, m))
		}
	}
	if o.root != nil {
		errs = append(errs, o.unmount(ctx, o.root))
		o.root = nil
	}
	return errors.Join(errs...)
}

// Branch mounts a new overlay over the base.
func (o *overlay) Branch(ctx context.Context) (Branch, error) {
	m, err := o.mount(ctx)
	if err != nil {
		return nil, err
	}
	return &ovBranch{o: o, m: m}, nil
}

type ovBranch struct {
	o *overlay
	m *ovMount
}

func (b *ovBranch) Root() string { return b.m.mnt }

func (b *ovBranch) Commit(ctx context.Context, opts CommitOptions) error {
	return fmt.Errorf("%s cannot commit a branch: %w", b.o.name, errors.ErrUnsupported)
}

func (b *ovBranch) Abort(ctx context.Context) error {
	if !b.o.live[b.m] {
		return nil
	}
	return b.o.unmount(ctx, b.m)
}

// runQuiet runs a program with a timeout and returns its failure with its
// output.
func runQuiet(ctx context.Context, timeout time.Duration, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
