package lineapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
)

// execHandler answers tree_exec with two chunks and exit 3, or with an
// error for node "gone".
type execHandler struct{ lineapi.Handler }

func (execHandler) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	if req.NodeID == "gone" {
		return api.ExecExit{}, api.Errorf(api.ErrState, "exec on node gone ended: the node was aborted")
	}
	for _, o := range []api.ExecOutput{{Stream: "stdout", Data: []byte(strings.Join(req.Argv, " "))}, {Stream: "stderr", Data: []byte("e")}} {
		if err := out(o); err != nil {
			return api.ExecExit{}, err
		}
	}
	return api.ExecExit{ExitCode: 3, DurationNS: 1}, nil
}

// TestExecStream: tree_exec's reply is its output lines, then its exit
// line (or an error), and the connection goes on in request mode.
func TestExecStream(t *testing.T) {
	path := serve(t, execHandler{facetest.NewEngine(t)}, lineapi.Config{})
	got := rawLines(t, path, `{"op":"tree_exec","tree_id":"t","node_id":"n1","argv":["echo","hi"]}`+"\n"+
		`{"op":"tree_exec","tree_id":"t","node_id":"gone","argv":["true"]}`+"\n"+`{"op":"ping"}`+"\n")
	if len(got) != 5 {
		t.Fatalf("replies %+v, want 2 output lines, an exit, an error and a pong", got)
	}
	if got[0].Status != api.StatusExecOutput || got[0].Output.Stream != "stdout" || string(got[0].Output.Data) != "echo hi" ||
		got[1].Status != api.StatusExecOutput || got[1].Output.Stream != "stderr" {
		t.Fatalf("output lines %+v %+v", got[0], got[1])
	}
	if got[2].Status != api.StatusExecExit || got[2].Exit == nil || got[2].Exit.ExitCode != 3 {
		t.Fatalf("exit line %+v", got[2])
	}
	if got[3].Status != api.StatusError || got[3].Code != api.CodeState || !strings.Contains(got[3].Message, "aborted") {
		t.Fatalf("error line %+v", got[3])
	}
	if got[4].Status != "pong" {
		t.Fatalf("after the exec: %+v", got[4])
	}
	// A handler that does not serve exec says so.
	plain := serve(t, facetest.NewEngine(t), lineapi.Config{})
	r := rawLines(t, plain, `{"op":"tree_exec","tree_id":"t","node_id":"n1","argv":["true"]}`+"\n")
	if len(r) != 1 || r[0].Code != api.CodeNotSupported {
		t.Fatalf("tree_exec without an Execer: %+v", r)
	}
}
