package cowfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// BenchmarkMetacopy: chmod, utimensat and chown of a 1 GiB lower file in a
// branch (each iteration in a fresh branch, forked untimed, so that the
// file is lower every time). Reported: ns/op of the call through the
// mount, and copied-B/op, what the branch holds after it (0 data bytes
// copied: only the metadata copy's inode).
func BenchmarkMetacopy(b *testing.B) {
	testenv.NeedFUSE(b)
	root := b.TempDir()
	base, mnt := filepath.Join(root, "base"), filepath.Join(root, "mnt")
	os.Mkdir(base, 0o755)
	os.Mkdir(mnt, 0o755)
	writeBig(b, filepath.Join(base, "big"), 1<<30)
	st, err := store.Open(store.Config{Dir: filepath.Join(root, "state"), Base: base})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	f, err := Mount(Config{Store: st, Mountpoint: mnt})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Unmount(true)
	p := filepath.Join(mnt, "big")
	seq := 0
	for _, c := range []struct {
		name string
		op   func() error
	}{
		{"chmod", func() error { return unix.Chmod(p, 0o600) }},
		{"utimes", func() error {
			return unix.UtimesNano(p, []unix.Timespec{{Sec: 1}, {Sec: 2}})
		}},
		{"chown", func() error { return unix.Lchown(p, 65534, 65534) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var held int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				seq++
				name := fmt.Sprintf("m%d", seq)
				if err := f.Create(name, "main", 0); err != nil {
					b.Fatal(err)
				}
				var sst unix.Stat_t
				unix.Stat(p, &sst) // looked up untimed, as a shell's stat before
				b.StartTimer()
				if err := c.op(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				held += st.Held()[name]
				if err := f.Abort(name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(held)/float64(b.N), "copied-B/op")
		})
	}
}

// writeBig writes n bytes of data (not a hole) to path.
func writeBig(b *testing.B, path string, n int64) {
	b.Helper()
	w, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for off := int64(0); off < n; off += int64(len(buf)) {
		if _, err := w.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkGitCommit: `git add -A && git commit` of a one-line change in a
// checkout of 3,000 files (30 directories of 100, with history in .git),
// natively on the host's filesystem and in a branch of a cowfs mount of it.
// Each iteration changes one line (untimed) and times the git command.
func BenchmarkGitCommit(b *testing.B) {
	testenv.NeedFUSE(b)
	testenv.NeedCommand(b, "git", "git")
	root := b.TempDir()
	repo := filepath.Join(root, "repo")
	makeCheckout(b, repo, 3000)
	native := filepath.Join(root, "native")
	if out, err := exec.Command("cp", "-a", repo, native).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v\n%s", err, out)
	}
	st, err := store.Open(store.Config{Dir: filepath.Join(root, "state"), Base: repo})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	mnt := filepath.Join(root, "mnt")
	os.Mkdir(mnt, 0o755)
	if err := st.Fork(store.Main, "b"); err != nil {
		b.Fatal(err)
	}
	f, err := Mount(Config{Store: st, Mountpoint: mnt, Branch: "b"})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Unmount(true)
	for _, dir := range []string{native, mnt} {
		git(b, dir, "git", "status", "-s") // the index refreshed once, untimed
	}
	for _, c := range []struct{ name, dir string }{{"native", native}, {"branch", mnt}} {
		b.Run(c.name, func(b *testing.B) {
			if c.dir == mnt {
				defer func() { b.ReportMetric(float64(st.Held()["b"]), "branch-held-B") }()
			}
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				line := fmt.Sprintf("line %d %d\n", i, time.Now().UnixNano())
				if err := os.WriteFile(filepath.Join(c.dir, "d7", "f707.txt"), []byte(line), 0o644); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				git(b, c.dir, "sh", "-c", "git add -A && git commit -q -m change")
			}
		})
	}
}

// makeCheckout makes a git repository of n small files with one commit.
func makeCheckout(b *testing.B, dir string, n int) {
	b.Helper()
	for i := range n {
		d := filepath.Join(dir, fmt.Sprintf("d%d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		body := fmt.Sprintf("package p%d\n\n// file %d\nfunc F%d() int { return %d }\n", i/100, i, i, i)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.txt", i)), []byte(body), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	git(b, dir, "git", "init", "-q")
	git(b, dir, "sh", "-c", "git add -A && git commit -q -m init && git gc -q")
}

func git(b *testing.B, dir string, argv ...string) {
	b.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@a",
		"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@a", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%v in %s: %v\n%s", argv, dir, err, out)
	}
}
