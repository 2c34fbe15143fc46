package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sergi/go-diff/diffmatchpatch"

	"github.com/arbor-dev/arbor/api"
)

// The bounds of tree_diff's text diffs: each file's two sides are read
// only up to DiffFileMax bytes, and a reply carries at most DiffTotalMax
// bytes of diff text; a change past either gets a note instead.
const (
	DiffFileMax  = 256 << 10
	DiffTotalMax = 2 << 20
)

// rebase is tree_rebase: the node's changes against its fork point (a
// stale node's, typically: a sibling committed first) replayed onto a new
// child of its parent, forked from the parent's state now, with the
// conflicts the files layer could not merge. The new node is live; its
// commit is refused while a conflict is unresolved.
func (e *Engine) rebase(ctx context.Context, ts *treeState, req api.Request) (api.Response, error) {
	const op = api.OpTreeRebase
	if err := validNode(op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	n, ok := ts.t.Node(req.NodeID)
	if !ok {
		return api.Response{}, api.Errorf(api.ErrNotFound, "%s: no node %q in tree %s", op, req.NodeID, ts.id)
	}
	if n.Parent == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: the root has no fork point", op)
	}
	rb, ok := ts.files.(Rebaser)
	if !ok {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: tree %s's files cannot replay changes", op, ts.id)
	}
	r, err := e.fork(ctx, ts, api.Request{Op: api.OpTreeFork, TreeID: ts.id, SourceID: n.Parent, Label: req.Label}, "tree_rebased", n.Parent, []string{req.Label})
	if err != nil {
		return api.Response{}, fmt.Errorf("%s %s: %w", op, req.NodeID, err)
	}
	conflicts, err := rb.Replay(ts.branch(req.NodeID), ts.branch(r.NodeID))
	if err != nil {
		if _, aerr := e.remove(context.WithoutCancel(ctx), ts, api.Request{Op: api.OpTreeAbort, TreeID: ts.id, NodeID: r.NodeID}); aerr != nil {
			err = fmt.Errorf("%w; aborting the new node %s: %w", err, r.NodeID, aerr)
		}
		return api.Response{}, fmt.Errorf("%s %s: %w", op, req.NodeID, err)
	}
	return api.Response{Status: "tree_rebased", TreeID: ts.id, NodeID: r.NodeID, Path: r.Path, Conflicts: conflicts}, nil
}

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
		past := fmt.Sprintf("no diff: the reply's diffs are past %d bytes", DiffTotalMax)
		total := 0
		for i := range changes {
			if err := ctx.Err(); err != nil {
				return api.Response{}, err
			}
			c := &changes[i]
			if c.Kind == "deleted" || c.Meta {
				continue // no data to diff; the data is the fork point's
			}
			if total >= DiffTotalMax { // past the total: not read at all
				c.Note = past
				continue
			}
			then, now, err := cd.DiffFile(branch, c.Path, DiffFileMax)
			switch {
			case err == nil:
			case isAPI(err): // the branch's state: stale, gone
				return api.Response{}, err
			default: // this path only, changed under the read (a symlink swapped in)
				c.Note = "no diff: it changed while it was read"
				continue
			}
			c.Diff, c.Note = TextDiff(c.Path, then, now)
			if total+len(c.Diff) > DiffTotalMax {
				c.Diff, c.Note = "", past
				total = DiffTotalMax
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
	text := unified(lines(a), lines(b), from, "b/"+path)
	if text == "" {
		return "", "no text change (mode or metadata)"
	}
	return text, ""
}

// diffContext is the unchanged lines a hunk shows around a change, and
// diffTime the longest a line diff may take: past it the diff is still
// right, only less small (Myers' search is cut short).
const (
	diffContext = 3
	diffTime    = 500 * time.Millisecond
)

// unified is the unified diff of a to b (lines with their newlines), in
// hunks of diffContext lines of context, over go-diff's line diff (Myers,
// each distinct line one rune); "" if they are equal.
func unified(a, b []string, from, to string) string {
	ids := map[string]rune{}
	var text []string // by id
	runes := func(ls []string) []rune {
		out := make([]rune, len(ls))
		for i, l := range ls {
			id, ok := ids[l]
			if !ok {
				id = rune(len(text))
				if id >= 0xD800 { // past the surrogates, which a string cannot hold
					id += 0x800
				}
				ids[l] = id
				text = append(text, l)
			}
			out[i] = id
		}
		return out
	}
	line := func(id rune) string {
		if id >= 0xD800 {
			id -= 0x800
		}
		return text[id]
	}
	ra, rb := runes(a), runes(b)
	dmp := diffmatchpatch.New()
	dmp.DiffTimeout = diffTime
	type op struct {
		kind byte // ' ', '-', '+'
		line string
	}
	var ops []op
	var changed []int // indexes in ops
	for _, d := range dmp.DiffMainRunes(ra, rb, false) {
		k := map[diffmatchpatch.Operation]byte{diffmatchpatch.DiffEqual: ' ', diffmatchpatch.DiffDelete: '-', diffmatchpatch.DiffInsert: '+'}[d.Type]
		for _, id := range d.Text {
			if k != ' ' {
				changed = append(changed, len(ops))
			}
			ops = append(ops, op{k, line(id)})
		}
	}
	if len(changed) == 0 {
		return ""
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", from, to)
	rng := func(start, n int) string {
		if n == 1 {
			return fmt.Sprint(start)
		}
		if n == 0 {
			start--
		}
		return fmt.Sprintf("%d,%d", start, n)
	}
	lineA, lineB, next := 1, 1, 0 // the lines of ops[next] on each side
	for i := 0; i < len(changed); {
		// A hunk: changes no more than 2*diffContext equal lines apart.
		j := i
		for j+1 < len(changed) && changed[j+1]-changed[j] <= 2*diffContext+1 {
			j++
		}
		start, end := max(changed[i]-diffContext, 0), min(changed[j]+diffContext+1, len(ops))
		for ; next < start; next++ {
			lineA, lineB = lineA+1, lineB+1 // only equal lines lie between hunks
		}
		var na, nb int
		for _, o := range ops[start:end] {
			na += boolInt(o.kind != '+')
			nb += boolInt(o.kind != '-')
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", rng(lineA, na), rng(lineB, nb))
		for _, o := range ops[start:end] {
			sb.WriteByte(o.kind)
			sb.WriteString(o.line)
		}
		lineA, lineB, next = lineA+na, lineB+nb, end
		i = j + 1
	}
	return sb.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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
