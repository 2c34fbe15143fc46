// Package merge is the three-way merge of text, line by line (diff3): the
// changes two sides made to a common base are combined where they touch
// different lines, and where they touch the same lines differently the
// result holds both, between conflict markers, as git writes them:
//
//	<<<<<<< ours
//	our lines
//	=======
//	their lines
//	>>>>>>> theirs
//
// Changes that touch or abut each other are one region: both sides changed
// it, so it conflicts unless they made the same change. Pure: no I/O.
package merge

import (
	"bytes"

	"github.com/sergi/go-diff/diffmatchpatch"
)

// Conflict markers; a line starting with Start marks an unresolved
// conflict.
const (
	Start = "<<<<<<< "
	Mid   = "=======\n"
	End   = ">>>>>>> "
)

// Lines merges ours and theirs, each derived from base. The labels name
// the sides in the markers. It returns the merged text and the number of
// conflicting regions in it.
func Lines(base, ours, theirs []byte, oursLabel, theirsLabel string) ([]byte, int) {
	b, o, t := split(base), split(ours), split(theirs)
	enc := encoder{ids: map[string]rune{}}
	br, or, tr := enc.runes(b), enc.runes(o), enc.runes(t)
	ho, ht := hunks(br, or), hunks(br, tr)
	var out bytes.Buffer
	conflicts := 0
	pos := 0       // next base line to copy
	dO, dT := 0, 0 // how far each side's line numbers are ahead of base's, before pos
	i, j := 0, 0
	for i < len(ho) || j < len(ht) {
		// The next region: the earliest hunk, and every hunk of either
		// side that overlaps or abuts the region so far.
		var lo, hi int
		switch {
		case j >= len(ht) || (i < len(ho) && ho[i].b0 <= ht[j].b0):
			lo, hi = ho[i].b0, ho[i].b1
		default:
			lo, hi = ht[j].b0, ht[j].b1
		}
		i1, j1 := i, j
		for {
			grew := false
			for i1 < len(ho) && ho[i1].b0 <= hi && ho[i1].b0 >= lo {
				hi = max(hi, ho[i1].b1)
				i1++
				grew = true
			}
			for j1 < len(ht) && ht[j1].b0 <= hi && ht[j1].b0 >= lo {
				hi = max(hi, ht[j1].b1)
				j1++
				grew = true
			}
			if !grew {
				break
			}
		}
		for _, l := range b[pos:lo] {
			out.WriteString(l)
		}
		oSide, dO2 := side(o, ho[i:i1], lo, hi, dO)
		tSide, dT2 := side(t, ht[j:j1], lo, hi, dT)
		switch {
		case i1 == i: // theirs alone changed it
			writeAll(&out, tSide)
		case j1 == j: // ours alone
			writeAll(&out, oSide)
		case equal(oSide, tSide):
			writeAll(&out, oSide)
		default:
			conflicts++
			out.WriteString(Start + oursLabel + "\n")
			writeAll(&out, oSide)
			endLine(&out)
			out.WriteString(Mid)
			writeAll(&out, tSide)
			endLine(&out)
			out.WriteString(End + theirsLabel + "\n")
		}
		pos, dO, dT, i, j = hi, dO2, dT2, i1, j1
	}
	for _, l := range b[pos:] {
		out.WriteString(l)
	}
	return out.Bytes(), conflicts
}

// hunk is one change of a side: base lines [b0, b1) became the side's
// lines [s0, s1).
type hunk struct{ b0, b1, s0, s1 int }

// hunks is the changes that turn base into side (Myers' line diff).
func hunks(base, side []rune) []hunk {
	dmp := diffmatchpatch.New()
	diffs := dmp.DiffMainRunes(base, side, false)
	var out []hunk
	ib, is := 0, 0
	var cur *hunk
	for _, d := range diffs {
		n := len([]rune(d.Text))
		switch d.Type {
		case diffmatchpatch.DiffEqual:
			if cur != nil {
				out = append(out, *cur)
				cur = nil
			}
			ib += n
			is += n
		case diffmatchpatch.DiffDelete:
			if cur == nil {
				cur = &hunk{b0: ib, b1: ib, s0: is, s1: is}
			}
			ib += n
			cur.b1 = ib
		case diffmatchpatch.DiffInsert:
			if cur == nil {
				cur = &hunk{b0: ib, b1: ib, s0: is, s1: is}
			}
			is += n
			cur.s1 = is
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// side is a side's lines for base lines [lo, hi), given its hunks within
// that range and d, how far its line numbers were ahead of base's at lo;
// it returns the lines and how far ahead they are at hi.
func side(lines []string, hs []hunk, lo, hi, d int) ([]string, int) {
	d2 := d
	for _, h := range hs {
		d2 += (h.s1 - h.s0) - (h.b1 - h.b0)
	}
	return lines[lo+d : hi+d2], d2
}

func split(data []byte) []string {
	var out []string
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			out = append(out, string(data))
			break
		}
		out = append(out, string(data[:i+1]))
		data = data[i+1:]
	}
	return out
}

// encoder gives each distinct line a rune, so that a line diff is a rune
// diff.
type encoder struct{ ids map[string]rune }

func (e *encoder) runes(lines []string) []rune {
	out := make([]rune, len(lines))
	for i, l := range lines {
		id, ok := e.ids[l]
		if !ok {
			id = rune(len(e.ids))
			if id >= 0xD800 { // past the surrogates, which a string cannot hold
				id += 0x800
			}
			e.ids[l] = id
		}
		out[i] = id
	}
	return out
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func writeAll(w *bytes.Buffer, lines []string) {
	for _, l := range lines {
		w.WriteString(l)
	}
}

// endLine ends the text with a newline, before a marker.
func endLine(w *bytes.Buffer) {
	if b := w.Bytes(); len(b) > 0 && b[len(b)-1] != '\n' {
		w.WriteByte('\n')
	}
}

// HasConflict reports whether text still holds a conflict marker line.
func HasConflict(text []byte) bool {
	return bytes.HasPrefix(text, []byte(Start)) || bytes.Contains(text, []byte("\n"+Start))
}
