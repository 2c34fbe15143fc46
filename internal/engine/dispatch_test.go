package engine

import (
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestDispatch: the engine serves exactly the tree verbs, the workspace
// verbs (views of trees) and ping of api's verb table (shutdown is the
// daemon's), each once.
func TestDispatch(t *testing.T) {
	want := map[string]bool{}
	for _, v := range api.Verbs() {
		if strings.HasPrefix(v.Op, "tree_") || strings.HasPrefix(v.Op, "ws_") || v.Op == api.OpPing ||
			strings.HasPrefix(v.Op, "file_") || strings.HasPrefix(v.Op, "exec_") {
			want[v.Op] = true
		}
	}
	for op := range engineVerbs {
		if !want[op] {
			t.Errorf("the engine serves %s, which is not a tree verb of the table", op)
		}
		if _, dup := treeVerbs[op]; dup {
			t.Errorf("%s is dispatched twice", op)
		}
	}
	for op := range treeVerbs {
		if !want[op] {
			t.Errorf("the engine serves %s, which is not a tree verb of the table", op)
		}
	}
	for op := range want {
		_, a := engineVerbs[op]
		_, b := treeVerbs[op]
		if !a && !b {
			t.Errorf("the table's %s is not served by the engine", op)
		}
	}
}
