package engine_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
)

// BenchmarkTextDiff: the worst file tree_diff diffs, 256 KiB of distinct
// lines on each side, every 50th line changed.
func BenchmarkTextDiff(b *testing.B) {
	var a, c strings.Builder
	for i := 0; a.Len() < engine.DiffFileMax-64; i++ {
		fmt.Fprintf(&a, "line %d of the file\n", i)
		if i%50 == 0 {
			fmt.Fprintf(&c, "changed %d\n", i)
		} else {
			fmt.Fprintf(&c, "line %d of the file\n", i)
		}
	}
	then := engine.FileVersion{Exists: true, Regular: true, Size: int64(a.Len()), Data: []byte(a.String())}
	now := engine.FileVersion{Exists: true, Regular: true, Size: int64(c.Len()), Data: []byte(c.String())}
	b.SetBytes(int64(a.Len() + c.Len()))
	for b.Loop() {
		if d, _ := engine.TextDiff("f", then, now); d == "" {
			b.Fatal("no diff")
		}
	}
}
