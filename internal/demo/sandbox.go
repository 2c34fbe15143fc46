package demo

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/arbor-dev/arbor/api"
)

// The demo in sandboxes (backend jail): each agent runs in its node's
// sandbox, in /tmp/workspace as the seed has it, through exec; the demo
// reads a workspace by copying it out of the sandbox (tar, vendored.bin
// left out and summed inside instead).

// runIn runs argv in label's sandbox, its output to stdout and stderr; a
// non-zero exit or a signal is an error.
func (r *run) runIn(ctx context.Context, label string, argv, env []string, stdout, stderr io.Writer) error {
	x, err := r.exec.Exec(ctx, api.Request{TreeID: r.treeID, NodeID: r.ids[label], Argv: argv, Env: env}, func(o api.ExecOutput) error {
		w := stdout
		if o.Stream == "stderr" {
			w = stderr
		}
		_, err := w.Write(o.Data)
		return err
	})
	if err == nil && (x.ExitCode != 0 || x.Signal != "") {
		err = fmt.Errorf("exit %d %s", x.ExitCode, x.Signal)
	}
	return err
}

// agentIn runs an agent's script in label's sandbox, in workDir.
func (r *run) agentIn(ctx context.Context, label, script, body string, env []string) error {
	env = append([]string{"PYTHON=python3", "VENDORED_BYTES=" + strconv.FormatInt(r.cfg.VendoredBytes, 10)}, env...)
	var out bytes.Buffer
	argv := []string{"sh", "-c", `mkdir -p "$1" && cd "$1" && exec sh -c "$2" "$3"`, "agent", workDir, body, script}
	if err := r.runIn(ctx, label, argv, env, &out, &out); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fmt.Errorf("demo: agent %s (%s in %s of node %s): %w: %s", label, script, workDir, r.ids[label], err, strings.TrimSpace(lastBytes(out.Bytes(), 2000)))
	}
	return nil
}

// look returns a host directory showing label's workspace now: its files
// on dir; on jail a fresh copy of its /tmp/workspace but vendored.bin.
func (r *run) look(ctx context.Context, label string) (string, error) {
	if r.exec == nil {
		return r.paths[label], nil
	}
	r.looks++
	dir := filepath.Join(r.scratch, fmt.Sprintf("%02d-%s", r.looks, label))
	pr, pw := io.Pipe()
	untarred := make(chan error, 1)
	go func() {
		err := untar(pr, dir)
		if err == nil {
			_, err = io.Copy(io.Discard, pr) // tar pads its last record past the end marker
		}
		pr.CloseWithError(err) // a failed untar ends the exec's output too
		untarred <- err
	}()
	var stderr bytes.Buffer
	argv := []string{"tar", "-C", workDir, "--format=posix", "--exclude=./" + vendoredPath, "-cf", "-", "."}
	if r.sum.Backend == BackendVM { // the guest's busybox tar has neither option
		argv = []string{"sh", "-c", `cd "$1" && exec tar --no-recursion -cf - $(find . ! -path "./$2")`, "look", workDir, vendoredPath}
	}
	err := r.runIn(ctx, label, argv, nil, pw, &stderr)
	pw.CloseWithError(err)
	if uerr := <-untarred; err == nil {
		err = uerr
	}
	if err != nil {
		return "", fmt.Errorf("demo: read %s's workspace: %w: %s", label, err, strings.TrimSpace(stderr.String()))
	}
	return dir, nil
}

// sample is the evidence in label's workspace, whose files root shows (a
// copy from look on jail, where vendored.bin is summed in the sandbox).
func (r *run) sample(ctx context.Context, label, root string) (snapshot, error) {
	if r.exec == nil {
		return sample(root)
	}
	s, err := sampleFiles(root)
	if err != nil {
		return s, err
	}
	var out bytes.Buffer
	if err := r.runIn(ctx, label, []string{"sh", "-c", `cd "$1" && md5sum "$2" && stat -c %s "$2"`, "sum", workDir, vendoredPath}, nil, &out, &out); err != nil {
		return s, fmt.Errorf("vendored.bin: %w: %s", err, out.String())
	}
	f := strings.Fields(out.String())
	if len(f) != 3 {
		return s, fmt.Errorf("vendored.bin: md5sum and stat said %q", out.String())
	}
	s.vendoredMD5 = f[0]
	s.vendoredSize, err = strconv.ParseInt(f[2], 10, 64)
	return s, err
}

// untar unpacks a tar stream of regular files and directories into dir
// (made), keeping modes and modification times (the .pyc rule needs
// them). Any other entry, or a name leaving dir, is an error.
func untar(r io.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if !filepath.IsLocal(name) {
			return fmt.Errorf("tar entry %q leaves the workspace", h.Name)
		}
		p := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			dirs = append(dirs, h)
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode)&0o777)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = os.Chtimes(p, h.ModTime, h.ModTime)
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("tar entry %q: type %q is not a file or directory", h.Name, h.Typeflag)
		}
	}
	for _, h := range dirs { // after their contents
		if err := os.Chtimes(filepath.Join(dir, filepath.Clean(h.Name)), h.ModTime, h.ModTime); err != nil {
			return err
		}
	}
	return nil
}
