package demo

import (
	"crypto/md5"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
)

func TestParseOutcome(t *testing.T) {
	tests := []struct {
		name string
		log  string
		want Outcome
	}{
		{"no run", "== files\n./a\n", Outcome{Label: "❓ no result"}},
		{"ok", "Ran 4 tests in 0.001s\n\nOK\n", Outcome{Label: "✅ passed", Line: "OK", Passed: true, Ran: 4}},
		{"real failures", "Ran 4 tests in 0.001s\n\nFAILED (failures=2)\n== files\n./x\n",
			Outcome{Label: "❌ failed (real failures)", Line: "FAILED (failures=2)", Ran: 4, Failures: 2}},
		{"errors", "Ran 1 test in 0.001s\nFAILED (errors=1)\n", Outcome{Label: "❌ failed (real failures)", Line: "FAILED (errors=1)", Ran: 1, Errors: 1}},
		{"unexpected success", "Ran 4 tests in 0.001s\n\nFAILED (expected failures=2, unexpected successes=1)\n",
			Outcome{Label: "❌ failed", Line: "FAILED (expected failures=2, unexpected successes=1)", Ran: 4, ExpectedFailures: 2, UnexpectedSuccesses: 1}},
		{"skips", "Ran 4 tests in 0.001s\nOK (skipped=1)\n", Outcome{Label: "⚠️ skipped", Line: "OK (skipped=1)", Ran: 4, Skipped: 1}},
		{"last run wins", "Ran 4 tests in 0s\nFAILED (failures=2)\n== again\nRan 4 tests in 0s\n\nOK\r\n",
			Outcome{Label: "✅ passed", Line: "OK", Passed: true, Ran: 4}},
		{"not a summary line", "OKAY then\nFAILED miserably\n", Outcome{Label: "❓ no result"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseOutcome(tt.log); got != tt.want {
				t.Errorf("ParseOutcome = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDiffLines(t *testing.T) {
	base := map[string]string{"m.py": "a\nb\nc\n", "t.py": "x\n"}
	tests := []struct {
		name string
		b    map[string]string
		want int
	}{
		{"same", map[string]string{"m.py": "a\nb\nc\n", "t.py": "x\n"}, 0},
		{"one line changed", map[string]string{"m.py": "a\nB\nc\n", "t.py": "x\n"}, 2},
		{"line inserted", map[string]string{"m.py": "a\nb\nb2\nc\n", "t.py": "x\n"}, 1},
		{"file deleted", map[string]string{"m.py": "a\nb\nc\n"}, 1},
		{"file added", map[string]string{"m.py": "a\nb\nc\n", "t.py": "x\n", "n.py": "1\n2\n"}, 2},
		{"rewritten", map[string]string{"m.py": "p\nq\n", "t.py": "x\n"}, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DiffLines(base, tt.b); got != tt.want {
				t.Errorf("DiffLines = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestPycacheMD5 checks forkd's definition against a list built by hand.
func TestPycacheMD5(t *testing.T) {
	root := t.TempDir()
	write := func(rel, body string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) }

	empty, n, err := pycacheMD5(root)
	if err != nil || n != 0 || empty != sum("") {
		t.Fatalf("empty workspace: %s %d %v", empty, n, err)
	}
	write("tests/__pycache__/t.pyc", "T")
	write("mathy/__pycache__/m.pyc", "M")
	write("mathy/__init__.py", "not cache")
	got, n, err := pycacheMD5(root)
	want := sum(sum("M") + "  ./mathy/__pycache__/m.pyc\n" + sum("T") + "  ./tests/__pycache__/t.pyc\n")
	if err != nil || n != 2 || got != want {
		t.Fatalf("pycacheMD5 = %s %d %v, want %s 2", got, n, err, want)
	}
	write("mathy/__init__.py", "changed source")
	if again, _, _ := pycacheMD5(root); again != got {
		t.Errorf("a source file changed the __pycache__ md5")
	}
	write("tests/__pycache__/t.pyc", "T2")
	if again, _, _ := pycacheMD5(root); again == got {
		t.Errorf("a changed .pyc did not change the md5")
	}
}
