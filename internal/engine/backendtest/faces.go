package backendtest

import (
	"errors"
	"io"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// testNodeFiles: a backend that shows a node's files itself
// (engine.FileServer) shows its files directory: what a command wrote is
// read back, a file written through it is what the command sees, and a
// path never leaves the node.
func testNodeFiles(e *env) {
	fsrv, ok := e.b.(engine.FileServer)
	if !ok {
		e.t.Skip("the backend shows a node's files directory at / (no engine.FileServer)")
	}
	e.start("n1")
	nf, err := fsrv.NodeFiles("n1", e.path("n1"))
	if err != nil {
		e.t.Fatal(err)
	}
	rc, _, err := nf.Open(e.ctx, "a.txt")
	if err != nil {
		e.t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "base" {
		e.t.Fatalf("a.txt through NodeFiles: %q", b)
	}
	if _, err := nf.Write(e.ctx, "sub/w.txt", 0o640, strings.NewReader("written")); err != nil {
		e.t.Fatal(err)
	}
	if _, _, err := nf.Open(e.ctx, "../../../../../etc/hostname"); !errors.Is(err, api.ErrNotFound) {
		e.t.Errorf("a path out of the node: %v, want not found", err)
	}
	if !e.b.Caps().Exec {
		return
	}
	x, o, err := e.exec("n1", engine.Command{Argv: []string{"sh", "-c", "cat sub/w.txt; echo out > made"}})
	if err != nil || x.ExitCode != 0 || o.get("stdout") != "written" {
		e.t.Fatalf("the command sees %q (%+v %v)", o.get("stdout"), x, err)
	}
	st, err := nf.Stat(e.ctx, "made")
	if err != nil || st.Size != 4 {
		e.t.Fatalf("what the command made, through NodeFiles: %+v %v", st, err)
	}
}

// testProcesses: a backend that runs background processes
// (engine.Processes) lists, logs and kills them, and they end with their
// node's suspend.
func testProcesses(e *env) {
	pb, ok := e.b.(engine.Processes)
	if !ok {
		e.t.Skip("the backend runs no background processes (no engine.Processes)")
	}
	e.start("n1")
	p, err := pb.Spawn(e.ctx, "n1", engine.Command{Argv: []string{"sh", "-c", "echo up; exec sleep 1000"}})
	if err != nil || p.ID == "" {
		e.t.Fatalf("spawn: %+v %v", p, err)
	}
	var out strings.Builder
	for deadline := time.Now().Add(10 * time.Second); out.String() != "up\n"; time.Sleep(10 * time.Millisecond) {
		out.Reset()
		if _, err := pb.Logs(e.ctx, "n1", p.ID, false, func(o api.ExecOutput) error { out.Write(o.Data); return nil }); err != nil {
			e.t.Fatal(err)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("logs: %q", out.String())
		}
	}
	if err := pb.Kill(e.ctx, "n1", p.ID); err != nil {
		e.t.Fatal(err)
	}
	ps, err := pb.ProcessList(e.ctx, "n1")
	if err != nil || len(ps) != 1 || ps[0].Exit == nil || ps[0].Exit.Signal != "KILL" {
		e.t.Fatalf("after kill: %+v %v", ps, err)
	}
	p2, err := pb.Spawn(e.ctx, "n1", engine.Command{Argv: []string{"sleep", "1000"}})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.b.Suspend(e.ctx, "n1"); err != nil {
		e.t.Fatal(err)
	}
	x, err := pb.Logs(e.ctx, "n1", p2.ID, true, func(api.ExecOutput) error { return nil })
	if err != nil || x == nil {
		e.t.Fatalf("a background process of a suspended node: %+v %v, want it ended", x, err)
	}
	if err := pb.Kill(e.ctx, "n1", "nope"); !errors.Is(err, api.ErrNotFound) {
		e.t.Errorf("kill of an unknown process: %v", err)
	}
}
