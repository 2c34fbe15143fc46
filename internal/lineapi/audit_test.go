package lineapi_test

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
)

// lockedBuf is a writer the test reads while the server writes.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) lines(t *testing.T) []audit.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []audit.Entry
	for ln := range strings.Lines(l.b.String()) {
		var e audit.Entry
		dec := json.NewDecoder(strings.NewReader(ln))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("audit line %q: %v", ln, err)
		}
		out = append(out, e)
	}
	return out
}

// TestAudit: every socket request, served, refused or malformed, and a
// watch, an exec and a files verb, gets one audit line with the face, the
// peer's uid, the verb, its tree, node and file, and the error code of a
// failure.
func TestAudit(t *testing.T) {
	buf := &lockedBuf{}
	path := serve(t, facetest.NewEngine(t), lineapi.Config{Audit: audit.New(buf, nil)})
	rawLines(t, path, strings.Join([]string{
		`{"op":"tree_create","tree_id":"t","base":"/b"}`,
		`{"op":"tree_fork","tree_id":"t","source_id":"n1","label":"a"}`,
		`{"op":"tree_commit","tree_id":"t","node_id":"n9"}`,
		`{"op":"tree_explode"}`,
		`{"op":"file_stat","tree_id":"t","node_id":"n1","path":"/nope"}`,
		`{"op":"tree_exec","tree_id":"t","node_id":"n1","argv":["true"]}`,
		`{"op":"tree_watch","tree_id":"t"}`,
	}, "\n")+"\n")
	uid := uint32(os.Getuid())
	want := []audit.Entry{
		{Op: api.OpTreeCreate, Tree: "t"},
		{Op: api.OpTreeFork, Tree: "t", Node: "n1"},
		{Op: api.OpTreeCommit, Tree: "t", Node: "n9", Code: api.CodeNotFound},
		{Op: "unknown", Code: api.CodeBadRequest},
		{Op: api.OpFileStat, Tree: "t", Node: "n1", File: "/nope", Code: api.CodeNotFound},
		{Op: api.OpTreeExec, Tree: "t", Node: "n1", Code: api.CodeNotSupported},
		{Op: api.OpTreeWatch, Tree: "t"},
	}
	var got []audit.Entry
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got = buf.lines(t); len(got) >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d audit lines, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Face != audit.FaceLine || g.UID == nil || *g.UID != uid || g.Time == "" ||
			g.Op != w.Op || g.Tree != w.Tree || g.Node != w.Node || g.Code != w.Code || g.File != w.File {
			t.Errorf("audit line %d: %+v, want face line, uid %d, %+v", i, g, uid, w)
		}
	}
}
