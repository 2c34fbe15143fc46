package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/arbor-dev/arbor/api"
)

// The bounds of tree_diff's text diffs: each file's two sides are read
// only up to DiffFileMax bytes, and a reply carries at most DiffTotalMax
// bytes of diff text; a change past either gets a note instead.
const (
	DiffFileMax  = 256 << 10
	DiffTotalMax = 2 << 20
)

// diff is tree_diff: the paths the node changed against its fork point,
// and a unified diff of each regular text file among them.
func (e *Engine) diff(ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	if _, ok := ts.t.Node(req.NodeID); !ok {
		return api.Response{}, api.Errorf(api.ErrNotFound, "%s: no node %q in tree %s", req.Op, req.NodeID, ts.id)
	}
	if req.NodeID == ts.t.Root() {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: the root has no fork point", req.Op)
	}
	d, ok := ts.files.(Differ)
	if !ok {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree %s's files cannot list changes", req.Op, ts.id)
	}
	branch := ts.branch(req.NodeID)
	changes, err := d.Diff(branch)
	if err != nil {
		return api.Response{}, err
	}
	changes = append([]api.Change{}, changes...)
	if cd, ok := d.(ContentDiffer); ok {
		total := 0
		for i := range changes {
			if err := ctx.Err(); err != nil {
				return api.Response{}, err
			}
			c := &changes[i]
			if c.Kind == "deleted" {
				continue
			}
			then, now, err := cd.DiffFile(branch, c.Path, DiffFileMax)
			if err != nil {
				return api.Response{}, err
			}
			c.Diff, c.Note = TextDiff(c.Path, then, now)
			if total+len(c.Diff) > DiffTotalMax {
				c.Diff, c.Note = "", fmt.Sprintf("no diff: the reply's diffs are past %d bytes", DiffTotalMax)
			}
			total += len(c.Diff)
		}
	}
	return api.Response{Status: api.OpTreeDiff, TreeID: ts.id, NodeID: req.NodeID, Changes: changes}, nil
}

// TextDiff is the unified diff of path from then to now, or, when there
// is none to give for a regular file, a note saying why ("" and "" for
// what is not a regular file now: a directory, a symlink).
func TextDiff(path string, then, now FileVersion) (diff, note string) {
	if !now.Regular {
		return "", ""
	}
	var a, b []byte
	for _, v := range []struct {
		side string
		fv   FileVersion
		out  *[]byte
	}{{"then", then, &a}, {"now", now, &b}} {
		if !v.fv.Regular {
			continue // added, or was not a regular file: diff from nothing
		}
		if v.fv.Data == nil && v.fv.Size > 0 {
			return "", fmt.Sprintf("no diff: %d bytes %s, over %d", v.fv.Size, v.side, DiffFileMax)
		}
		if !isText(v.fv.Data) {
			return "", "no diff: binary"
		}
		*v.out = v.fv.Data
	}
	from := "a/" + path
	if !then.Regular {
		from = "/dev/null"
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(a), B: lines(b),
		FromFile: from, ToFile: "b/" + path, Context: 3,
	})
	if err != nil {
		return "", "no diff: " + err.Error()
	}
	if text == "" {
		return "", "no text change (mode or metadata)"
	}
	return text, ""
}

// lines splits b after each newline; a last line without one is marked
// as git marks it, so that adding the newline shows as a change.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	l := strings.SplitAfter(string(b), "\n")
	if l[len(l)-1] == "" {
		return l[:len(l)-1]
	}
	l[len(l)-1] += "\n\\ No newline at end of file\n"
	return l
}

// isText: valid UTF-8 without a NUL byte (git's test is the NUL).
func isText(b []byte) bool {
	return bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
}
