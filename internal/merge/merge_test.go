package merge

import (
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	base := "a\nb\nc\nd\ne\n"
	for _, c := range []struct {
		name, ours, theirs, want string
		conflicts                int
	}{
		{"ours only", "a\nB\nc\nd\ne\n", base, "a\nB\nc\nd\ne\n", 0},
		{"theirs only", base, "a\nb\nc\nD\ne\n", "a\nb\nc\nD\ne\n", 0},
		{"both, apart", "A\nb\nc\nd\ne\n", "a\nb\nc\nd\nE\n", "A\nb\nc\nd\nE\n", 0},
		{"both, the same change", "a\nX\nc\nd\ne\n", "a\nX\nc\nd\ne\n", "a\nX\nc\nd\ne\n", 0},
		{"inserts apart", "a\nnew1\nb\nc\nd\ne\n", "a\nb\nc\nd\nnew2\ne\n", "a\nnew1\nb\nc\nd\nnew2\ne\n", 0},
		{"deletes apart", "b\nc\nd\ne\n", "a\nb\nc\nd\n", "b\nc\nd\n", 0},
		{"conflict", "a\nours\nc\nd\ne\n", "a\ntheirs\nc\nd\ne\n",
			"a\n<<<<<<< ours\nours\n=======\ntheirs\n>>>>>>> theirs\nc\nd\ne\n", 1},
		{"adjacent changes conflict", "a\nB\nc\nd\ne\n", "a\nb\nC\nd\ne\n",
			"a\n<<<<<<< ours\nB\nc\n=======\nb\nC\n>>>>>>> theirs\nd\ne\n", 1},
		{"no newline at the end", "a\nb\nc\nd\nours", "a\nb\nc\nd\ntheirs",
			"a\nb\nc\nd\n<<<<<<< ours\nours\n=======\ntheirs\n>>>>>>> theirs\n", 1},
		{"two conflicts", "X\nb\nc\nd\nY\n", "1\nb\nc\nd\n2\n",
			"<<<<<<< ours\nX\n=======\n1\n>>>>>>> theirs\nb\nc\nd\n<<<<<<< ours\nY\n=======\n2\n>>>>>>> theirs\n", 2},
	} {
		got, n := Lines([]byte(base), []byte(c.ours), []byte(c.theirs), "ours", "theirs")
		if string(got) != c.want || n != c.conflicts {
			t.Errorf("%s: got %d conflicts\n%s\nwant %d\n%s", c.name, n, got, c.conflicts, c.want)
		}
		if HasConflict(got) != (c.conflicts > 0) {
			t.Errorf("%s: HasConflict = %v", c.name, HasConflict(got))
		}
	}
	// Added on both sides from nothing: the same text merges, other text conflicts.
	if got, n := Lines(nil, []byte("x\n"), []byte("x\n"), "o", "t"); string(got) != "x\n" || n != 0 {
		t.Errorf("the same file added on both sides: %q %d", got, n)
	}
	if _, n := Lines(nil, []byte("x\n"), []byte("y\n"), "o", "t"); n != 1 {
		t.Errorf("different files added on both sides: %d conflicts", n)
	}
	// A long file changed far apart on each side.
	var b strings.Builder
	for i := range 1000 {
		b.WriteString(strings.Repeat("l", i%7+1) + "\n")
	}
	long := b.String()
	o := strings.Replace(long, "lllllll\n", "OURS\n", 1)
	th := long[:len(long)-8] + "THEIRS\n"
	got, n := Lines([]byte(long), []byte(o), []byte(th), "o", "t")
	if n != 0 || !strings.HasPrefix(string(got), "l\nll\nlll\nllll\nlllll\nllllll\nOURS\n") || !strings.HasSuffix(string(got), "THEIRS\n") {
		t.Errorf("far apart in a long file: %d conflicts", n)
	}
}
