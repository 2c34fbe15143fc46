package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/testenv"
)

var (
	imgOnce sync.Once
	testImg *Image
	imgErr  error
)

// image builds (once per test binary, cached under $ARBOR_VM_TEST_HOME or
// the test's temp dir) the test image, or skips.
func image(t testing.TB) *Image {
	t.Helper()
	testenv.NeedQEMU(t)
	imgOnce.Do(func() {
		home := os.Getenv("ARBOR_VM_TEST_HOME")
		if home == "" {
			home = filepath.Join(os.TempDir(), "arbor-vm-test-images")
		}
		agent := filepath.Join(home, "arbor-guest")
		os.MkdirAll(home, 0o700)
		cmd := exec.Command("go", "build", "-o", agent, "github.com/arbor-dev/arbor/cmd/arbor-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			imgErr = fmt.Errorf("build the agent: %v: %s", err, out)
			return
		}
		testImg, imgErr = Build(context.Background(), Config{Home: home, Agent: agent, Include: PythonInclude()})
	})
	if imgErr != nil {
		t.Fatalf("image: %v", imgErr)
	}
	return testImg
}

// startVM starts a VM of img from its template in a fresh directory.
func startVM(t testing.TB, img *Image, name string) *VM {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := Seed(dir, img.Mem, img.Dev); err != nil {
		t.Fatal(err)
	}
	v, err := Start(t.Context(), img, dir, name, "")
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { v.Kill() })
	return v
}

// sh runs script in v and returns its stdout; it fails t on a non-zero exit.
func sh(t testing.TB, v *VM, script string) string {
	t.Helper()
	var out, errb bytes.Buffer
	x, err := v.Exec(t.Context(), Cmd{Argv: []string{"sh", "-c", script}, Timeout: time.Minute}, func(s string, d []byte) error {
		if s == "stdout" {
			out.Write(d)
		} else {
			errb.Write(d)
		}
		return nil
	})
	if err != nil || x.Code != 0 || x.Signal != "" {
		t.Fatalf("%q: %+v %v (stderr %q)", script, x, err, errb.String())
	}
	return out.String()
}

func TestBootExec(t *testing.T) {
	img := image(t)
	t.Logf("image %s, cold boot %v", img.Dir, img.BootTime)
	t0 := time.Now()
	v := startVM(t, img, "n1")
	t.Logf("clone to agent reply: %v", time.Since(t0))
	if got := sh(t, v, "echo hi; hostname"); got != "hi\nn1\n" {
		t.Fatalf("stdout %q", got)
	}
	x, err := v.Exec(t.Context(), Cmd{Argv: []string{"sh", "-c", "cat; exit 3"}, Stdin: strings.NewReader("in")}, func(string, []byte) error { return nil })
	if err != nil || x.Code != 3 {
		t.Fatalf("exit 3: %+v %v", x, err)
	}
	x, err = v.Exec(t.Context(), Cmd{Argv: []string{"sleep", "30"}, Timeout: 200 * time.Millisecond}, func(string, []byte) error { return nil })
	if err != nil || x.Signal != "KILL" {
		t.Fatalf("timeout: %+v %v", x, err)
	}
	if err := v.WriteFile(t.Context(), "/tmp/f", []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := v.ReadFile(t.Context(), "/tmp/f"); err != nil || string(b) != "data" {
		t.Fatalf("read back %q %v", b, err)
	}
}

// TestFiles: the node's files are the guest's /workspace, both ways.
func TestFiles(t *testing.T) {
	img := image(t)
	files := t.TempDir()
	os.WriteFile(filepath.Join(files, "a.txt"), []byte("host\n"), 0o644)
	dir := filepath.Join(t.TempDir(), "f1")
	if err := Seed(dir, img.Mem, img.Dev); err != nil {
		t.Fatal(err)
	}
	v, err := Start(t.Context(), img, dir, "f1", files)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Kill()
	defer func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, logFile))
			t.Logf("serial: %s", b)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if os.Getenv("ARBOR_VM_DEBUG") != "" {
		t.Logf("%s", sh(t, v, "grep workspace /proc/mounts; ls -la /dev/fuse; timeout 3 stat /workspace; echo rc=$?; ps"))
	}
	var out bytes.Buffer
	x, err := v.Exec(ctx, Cmd{Argv: []string{"sh", "-c", "cat a.txt; mkdir -p d; echo guest > d/b.txt; mv d/b.txt d/c.txt; echo x >> d/c.txt; ls d"}, Cwd: "/workspace"},
		func(s string, d []byte) error { out.Write(d); return nil })
	if err != nil || x.Code != 0 {
		t.Fatalf("exec: %+v %v: %s", x, err, out.String())
	}
	if out.String() != "host\nc.txt\n" {
		t.Fatalf("output %q", out.String())
	}
	if b, err := os.ReadFile(filepath.Join(files, "d", "c.txt")); err != nil || string(b) != "guest\nx\n" {
		t.Fatalf("host reads %q %v", b, err)
	}
}

// TestPython: an image built with PythonInclude runs the host's python3.
func TestPython(t *testing.T) {
	img := image(t)
	if PythonInclude() == nil {
		testenv.Missing(t, testenv.Python, "no /usr/bin/python3 to include")
	}
	v := startVM(t, img, "py")
	if got := sh(t, v, `python3 -c 'import hashlib, json, sys; print(json.dumps([sys.version_info[0], hashlib.sha256(b"x").hexdigest()[:8]]))'`); got != "[3, \"2d711642\"]\n" {
		t.Fatalf("python3 says %q", got)
	}
}
