package jailbackend

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// TestNodeFilesAndProcesses: a node's files API shows /workspace and /tmp
// as its processes see them; background processes are numbered per node,
// logged (the last LogBytes), killed, listed with how they ended, and end
// with their node's suspend; a stopped node holds none.
func TestNodeFilesAndProcesses(t *testing.T) {
	f := newFixture(t)
	p1 := f.files("n1", "f", "one\n")
	if err := f.b.Start(f.ctx, "n1", p1); err != nil {
		t.Fatal(err)
	}
	fsrv := f.b.(engine.FileServer)
	nf, err := fsrv.NodeFiles("n1", p1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nf.Write(f.ctx, "/tmp/t", 0o600, strings.NewReader("in tmp")); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /tmp/t; cat /workspace/f; echo made > /workspace/g"); got != "in tmpone\n" {
		t.Fatalf("the sandbox sees %q", got)
	}
	rc, _, err := nf.Open(f.ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "made\n" {
		t.Errorf("g through the files API: %q", b)
	}
	if _, err := fsrv.NodeFiles("n9", p1); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("files of a node not held: %v", err)
	}

	pb := f.b.(engine.Processes)
	chatty := engine.Command{Argv: []string{"sh", "-c", "head -c 1500000 /dev/zero | tr '\\0' a; echo; echo end; exec sleep 1000"}}
	p, err := pb.Spawn(f.ctx, "n1", chatty)
	if err != nil || p.ID != "p1" || p.Pid <= 1 {
		t.Fatalf("spawn: %+v %v", p, err)
	}
	var out bytes.Buffer
	for deadline := time.Now().Add(10 * time.Second); !strings.HasSuffix(out.String(), "end\n"); {
		out.Reset()
		if _, err := pb.Logs(f.ctx, "n1", "p1", false, func(o api.ExecOutput) error { out.Write(o.Data); return nil }); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs: %d bytes ending %q", out.Len(), out.String()[max(out.Len()-20, 0):])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out.Len() > LogBytes {
		t.Errorf("the log kept %d bytes, more than %d", out.Len(), LogBytes)
	}
	if err := pb.Kill(f.ctx, "n1", "p1"); err != nil {
		t.Fatal(err)
	}
	p2, err := pb.Spawn(f.ctx, "n1", engine.Command{Argv: []string{"sleep", "1000"}})
	if err != nil || p2.ID != "p2" {
		t.Fatalf("second spawn: %+v %v", p2, err)
	}
	if err := f.b.Suspend(f.ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	ps, err := pb.ProcessList(f.ctx, "n1")
	if err != nil || len(ps) != 2 || ps[0].Exit == nil || ps[0].Exit.Signal != "KILL" {
		t.Fatalf("after kill and suspend: %+v %v", ps, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ps[1].Exit == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ps, _ = pb.ProcessList(f.ctx, "n1")
	}
	if ps[1].Exit == nil {
		t.Errorf("a background process outlived its node's suspend: %+v", ps[1])
	}
	if _, err := pb.Spawn(f.ctx, "n1", engine.Command{Argv: []string{"true"}}); !errors.Is(err, api.ErrState) {
		t.Errorf("spawn on a suspended node: %v", err)
	}
	if err := f.b.Stop(f.ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.ProcessList(f.ctx, "n1"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("processes of a stopped node: %v", err)
	}
}
