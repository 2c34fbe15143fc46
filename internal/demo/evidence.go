package demo

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Paths inside a workspace.
const (
	initPyPath   = "mathy/__init__.py"
	vendoredPath = "build-artifacts/vendored.bin"
)

// snapshot is the evidence sampled in one workspace at one moment.
type snapshot struct {
	initPy       string
	pycache      string
	pycacheFiles int
	vendoredMD5  string
	vendoredSize int64
}

func sample(root string) (snapshot, error) {
	s, err := sampleFiles(root)
	if err != nil {
		return s, err
	}
	s.vendoredMD5, s.vendoredSize, err = fileMD5(filepath.Join(root, vendoredPath))
	return s, err
}

// sampleFiles is sample but for vendored.bin.
func sampleFiles(root string) (snapshot, error) {
	var s snapshot
	b, err := os.ReadFile(filepath.Join(root, initPyPath))
	if err != nil {
		return s, err
	}
	s.initPy = string(b)
	s.pycache, s.pycacheFiles, err = pycacheMD5(root)
	return s, err
}

func fileMD5(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := md5.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// inPycache reports whether a slash path has a __pycache__ component.
func inPycache(rel string) bool {
	return slices.Contains(strings.Split(rel, "/"), "__pycache__")
}

// pycacheMD5 is forkd's md5 of the __pycache__ trees: md5sum every regular
// file under any __pycache__ directory, sort the "<md5>  <path>" lines by
// path (relative to root), and md5 the list. It also returns the file count.
func pycacheMD5(root string) (string, int, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && inPycache(filepath.ToSlash(rel)) {
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	slices.Sort(files)
	var list strings.Builder
	for _, rel := range files {
		sum, _, err := fileMD5(filepath.Join(root, filepath.FromSlash(rel)))
		if err != nil {
			return "", 0, err
		}
		fmt.Fprintf(&list, "%s  ./%s\n", sum, rel)
	}
	s := md5.Sum([]byte(list.String()))
	return hex.EncodeToString(s[:]), len(files), nil
}

// pySources reads every .py file of a workspace outside __pycache__, keyed
// by slash path relative to root.
func pySources(root string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "__pycache__" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(p, ".py") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	return out, err
}

// latestMtime is the newest modification time among files (slash paths
// relative to root); zero if none can be read.
func latestMtime(root string, files map[string]string) time.Time {
	var t time.Time
	for rel := range files {
		if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel))); err == nil && fi.ModTime().After(t) {
			t = fi.ModTime()
		}
	}
	return t
}

// DiffLines is the size of a line diff from a to b, two sets of files keyed
// by path: the lines removed plus the lines added (a file only on one side
// counts all its lines).
func DiffLines(a, b map[string]string) int {
	n := 0
	for p, x := range a {
		n += lineDiff(splitLines(x), splitLines(b[p]))
	}
	for p, y := range b {
		if _, ok := a[p]; !ok {
			n += len(splitLines(y))
		}
	}
	return n
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// lineDiff is len(a)+len(b)-2*LCS(a, b). The files are a few dozen lines, so
// the quadratic table is fine.
func lineDiff(a, b []string) int {
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			case prev[j+1] >= cur[j]:
				cur[j+1] = prev[j+1]
			default:
				cur[j+1] = cur[j]
			}
		}
		prev, cur = cur, prev
	}
	return len(a) + len(b) - 2*prev[len(b)]
}

// Outcome is a unittest run as its summary lines tell it.
type Outcome struct {
	// Label is forkd's: "✅ passed", "⚠️ skipped" (OK only thanks to skips
	// or expected failures), "❌ failed (real failures)" (failures or
	// errors), "❌ failed" (FAILED for another reason, such as an unexpected
	// success), or "❓ no result".
	Label               string `json:"label"`
	Line                string `json:"line"` // the last "OK ..." or "FAILED ..." line
	Passed              bool   `json:"passed"`
	Ran                 int    `json:"ran"`
	Failures            int    `json:"failures"`
	Errors              int    `json:"errors"`
	Skipped             int    `json:"skipped"`
	ExpectedFailures    int    `json:"expected_failures"`
	UnexpectedSuccesses int    `json:"unexpected_successes"`
}

var (
	resultLine = regexp.MustCompile(`^(OK|FAILED)(?: \((.*)\))?\s*$`)
	ranLine    = regexp.MustCompile(`^Ran (\d+) tests? in `)
)

// ParseOutcome reads the outcome of the last unittest run in log.
func ParseOutcome(log string) Outcome {
	o := Outcome{Label: "❓ no result"}
	ran := 0
	for _, line := range strings.Split(log, "\n") {
		line = strings.TrimRight(line, "\r")
		if m := ranLine.FindStringSubmatch(line); m != nil {
			ran, _ = strconv.Atoi(m[1])
			continue
		}
		m := resultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		o = Outcome{Line: line, Ran: ran}
		for _, kv := range strings.Split(m[2], ",") {
			k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok {
				continue
			}
			n, _ := strconv.Atoi(v)
			switch k {
			case "failures":
				o.Failures = n
			case "errors":
				o.Errors = n
			case "skipped":
				o.Skipped = n
			case "expected failures":
				o.ExpectedFailures = n
			case "unexpected successes":
				o.UnexpectedSuccesses = n
			}
		}
		switch {
		case m[1] == "OK" && o.Skipped+o.ExpectedFailures > 0:
			o.Label = "⚠️ skipped"
		case m[1] == "OK":
			o.Label, o.Passed = "✅ passed", true
		case o.Failures+o.Errors > 0:
			o.Label = "❌ failed (real failures)"
		default:
			o.Label = "❌ failed"
		}
	}
	return o
}
