package daemon

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
)

// TestJailExecAndFilesOverFaces: through the real daemon, a jail node's
// /workspace and /tmp through the files verbs (the socket and HTTP) are
// what its processes see; exec over HTTP in the collected form (bounded,
// truncated past its ring) and as NDJSON; stdin forwarded over the
// socket; a pty with its window size and a resize; a timeout's KILL; and
// background processes listed, logged (followed over HTTP) and killed.
func TestJailExecAndFilesOverFaces(t *testing.T) {
	needJail(t)
	tg := realTarget(t)
	lc := client.New(serveLine(t, tg.Handler))
	defer lc.Close()
	hc := client.NewHTTP(serveHTTP(t, tg.Handler), testToken, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	must := mustDo(t, ctx, lc)
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "jf", Base: tg.Base, Backend: "jail"})
	n := tr.Root
	sh := func(script string) string {
		t.Helper()
		out, x, err := shIn(ctx, lc, "jf", n, script)
		if err != nil || x.ExitCode != 0 {
			t.Fatalf("%s: %q %+v %v", script, out, x, err)
		}
		return out
	}

	// Files: /tmp and /workspace, both ways.
	if _, err := lc.WriteFile(ctx, "jf", n, "/tmp/x", 0o600, strings.NewReader("in tmp")); err != nil {
		t.Fatal(err)
	}
	if out := sh("cat /tmp/x; stat -c %a /tmp/x"); out != "in tmp600\n" {
		t.Fatalf("the sandbox sees /tmp/x as %q", out)
	}
	sh("echo w > /workspace/w; echo t > /tmp/t; ln -s /etc/hostname /workspace/host")
	for p, want := range map[string]string{"/workspace/w": "w\n", "w": "w\n", "/tmp/t": "t\n"} {
		var b bytes.Buffer
		if _, err := hc.ReadFile(ctx, "jf", n, p, &b); err != nil || b.String() != want {
			t.Errorf("read %s over HTTP: %q, %v", p, b.String(), err)
		}
	}
	var b bytes.Buffer
	if _, err := hc.ReadFile(ctx, "jf", n, "host", &b); err == nil {
		t.Errorf("an absolute symlink of the sandbox reached the host's /etc/hostname: %q", b.String())
	}

	// Exec over HTTP, collected.
	xr, err := hc.ExecCollect(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || xr.Stdout != "out\n" || xr.Stderr != "err\n" || xr.ExitCode != 3 || xr.Truncated {
		t.Fatalf("collected: %+v %v", xr, err)
	}
	xr, err = hc.ExecCollect(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sh", "-c", "head -c 6000000 /dev/zero | tr '\\0' a; echo -n END"}})
	if err != nil || !xr.Truncated || len(xr.Stdout) != api.MaxExecCollect || !strings.HasSuffix(xr.Stdout, "aaEND") {
		t.Fatalf("collected 6 MB: truncated %v, %d bytes, %v", xr.Truncated, len(xr.Stdout), err)
	}
	// Streamed (NDJSON): the first line comes before the command ends.
	var chunks []string
	start := time.Now()
	var first time.Duration
	x, err := hc.Exec(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sh", "-c", "echo a; sleep 0.5; echo b"}}, func(o api.ExecOutput) error {
		if first == 0 {
			first = time.Since(start)
		}
		chunks = append(chunks, string(o.Data))
		return nil
	})
	if err != nil || x.ExitCode != 0 || strings.Join(chunks, "") != "a\nb\n" || first >= 500*time.Millisecond {
		t.Fatalf("streamed: %q %+v %v (first chunk after %v)", chunks, x, err, first)
	}
	x, err = hc.Exec(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sleep", "10"}, TimeoutNS: int64(200 * time.Millisecond)}, func(api.ExecOutput) error { return nil })
	if err != nil || x.Signal != "KILL" {
		t.Fatalf("timeout: %+v %v", x, err)
	}

	// Stdin over the socket.
	var out bytes.Buffer
	collect := func(o api.ExecOutput) error { out.Write(o.Data); return nil }
	x, err = lc.ExecInput(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sh", "-c", "tr a-z A-Z; echo done"}}, strings.NewReader("hello\n"), nil, collect)
	if err != nil || x.ExitCode != 0 || out.String() != "HELLO\ndone\n" {
		t.Fatalf("stdin: %q %+v %v", out.String(), x, err)
	}
	// A pty of 30x100, then resized to 40x120.
	out.Reset()
	resize := make(chan api.Input, 1)
	x, err = lc.ExecInput(ctx, api.Request{TreeID: "jf", NodeID: n, TTY: true, Rows: 30, Cols: 100,
		Argv: []string{"sh", "-c", "stty size; test -t 0 && echo tty; i=0; while [ \"$(stty size)\" = '30 100' ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; stty size"}}, nil, resize, func(o api.ExecOutput) error {
		out.Write(o.Data)
		if strings.Contains(out.String(), "tty") && len(resize) == 0 && !strings.Contains(out.String(), "sent") {
			resize <- api.Input{Rows: 40, Cols: 120}
			out.WriteString("sent")
		}
		return nil
	})
	if err != nil || x.ExitCode != 0 || !strings.HasPrefix(strings.ReplaceAll(out.String(), "\r", ""), "30 100\ntty\nsent") || !strings.HasSuffix(strings.ReplaceAll(out.String(), "\r", ""), "40 120\n") {
		t.Fatalf("tty: %q %+v %v", out.String(), x, err)
	}

	// Background processes: over the socket, and over HTTP.
	pid, err := lc.Spawn(ctx, api.Request{TreeID: "jf", NodeID: n, Argv: []string{"sh", "-c", "echo started; exec sleep 1000"}})
	if err != nil || pid == "" {
		t.Fatalf("spawn: %q %v", pid, err)
	}
	ps, err := lc.Processes(ctx, "jf", n)
	if err != nil || len(ps) != 1 || ps[0].ID != pid || ps[0].Exit != nil || ps[0].Argv[0] != "sh" {
		t.Fatalf("exec_list: %+v %v", ps, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out.Reset()
		if _, err := lc.Logs(ctx, "jf", n, pid, false, collect); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "started") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := lc.Kill(ctx, "jf", n, pid); err != nil {
		t.Fatal(err)
	}
	if ps, err := lc.Processes(ctx, "jf", n); err != nil || len(ps) != 1 || ps[0].Exit == nil || ps[0].Exit.Signal != "KILL" {
		t.Fatalf("after kill: %+v %v", ps, err)
	}
	r, err := hc.Do(ctx, api.Request{Op: api.OpTreeExec, TreeID: "jf", NodeID: n, Detach: true, Argv: []string{"sh", "-c", "echo one; sleep 0.3; echo two; exit 4"}})
	if err != nil || r.ProcessID == "" {
		t.Fatalf("spawn over HTTP: %+v %v", r, err)
	}
	out.Reset()
	lx, err := hc.Logs(ctx, "jf", n, r.ProcessID, true, collect)
	if err != nil || lx == nil || lx.ExitCode != 4 || out.String() != "one\ntwo\n" {
		t.Fatalf("logs --follow over HTTP: %q %+v %v", out.String(), lx, err)
	}
	if _, err := lc.Logs(ctx, "jf", n, "p999", false, collect); err == nil {
		t.Error("logs of an unknown process")
	}
	// A suspended node's processes are gone with it; its files stay readable.
	must(api.Request{Op: api.OpTreeSuspend, TreeID: "jf", NodeID: n})
	b.Reset()
	if _, err := lc.ReadFile(ctx, "jf", n, "/tmp/t", &b); err != nil || b.String() != "t\n" {
		t.Errorf("read a suspended jail node's /tmp: %q %v", b.String(), err)
	}
}
