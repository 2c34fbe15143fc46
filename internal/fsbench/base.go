package fsbench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

const maxRepoChanges = 20

// prepareBase builds the main base (what the selected cases use) and the
// branch-create bases.
func (h *harness) prepareBase(ctx context.Context, cases []*caseDef, systems []System) error {
	h.base = filepath.Join(h.dir, "base")
	h.tmp = filepath.Join(h.dir, "tmp")
	h.runID = time.Now().UnixNano()
	for _, d := range []string{h.base, h.tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("fsbench: base: %w", err)
		}
	}
	if p, err := exec.LookPath("go"); err == nil {
		h.goBin = p
	} else if _, err := os.Stat("/usr/local/go/bin/go"); err == nil {
		h.goBin = "/usr/local/go/bin/go"
	}
	anyBrancher := false
	for _, s := range systems {
		if _, ok := s.(Brancher); ok {
			anyBrancher = true
		}
	}
	uses := 0
	h.branchBases = map[int]string{}
	for _, c := range cases {
		uses |= c.uses
		if c.branchBase != nil && anyBrancher {
			h.branchBases[c.branchBase(h.cfg)] = ""
		}
	}
	h.uses = uses

	steps := []struct {
		use  int
		name string
		fn   func(context.Context) error
	}{
		{useBig, "big files", h.makeBig},
		{useFiles, "small files", func(context.Context) error {
			return makeFiles(filepath.Join(h.base, "files"), h.cfg.Files, smallFileSize, 0)
		}},
		{useRepo, "git checkout", h.makeRepo},
		{useGoMod, "go module", h.makeGoMod},
	}
	for _, s := range steps {
		if uses&s.use == 0 {
			continue
		}
		t := time.Now()
		if err := s.fn(ctx); err != nil {
			return fmt.Errorf("fsbench: base %s: %w", s.name, err)
		}
		h.cfg.Logger.Info("base", "part", s.name, "took", time.Since(t).Round(time.Millisecond))
	}
	for n := range h.branchBases {
		d := filepath.Join(h.dir, fmt.Sprintf("base-n%d", n))
		if err := makeFiles(d, n, 64, 1000); err != nil {
			return fmt.Errorf("fsbench: base of %d files: %w", n, err)
		}
		h.branchBases[n] = d
	}
	unix.Sync()
	return ctx.Err()
}

func (h *harness) makeBig(ctx context.Context) error {
	for _, name := range []string{"big", "big-mod"} {
		f, err := os.Create(filepath.Join(h.base, name))
		if err != nil {
			return err
		}
		err = writeBig(f, h.cfg.Size)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// makeFiles makes n files of size bytes in dir, perDir to a subdirectory
// d000, d001, ... (0: all in dir).
func makeFiles(dir string, n, size, perDir int) error {
	data := pattern(size, 3)
	for i := range n {
		d := dir
		if perDir > 0 {
			d = filepath.Join(dir, fmt.Sprintf("d%03d", i/perDir))
		}
		if i == 0 || (perDir > 0 && i%perDir == 0) {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(d, fileName(i)), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// prepareSystem readies a freshly set-up root: it checks that the root
// shows the base, and with modify rewrites the first page of big-mod in
// place (the same bytes), so an overlay copies it up before the case runs.
func (h *harness) prepareSystem(ctx context.Context, root string, modify bool) error {
	if h.uses&useFiles != 0 {
		if _, err := os.Lstat(filepath.Join(root, "files", fileName(0))); err != nil {
			return fmt.Errorf("fsbench: the root does not show the base: %w", err)
		}
	}
	if !modify {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(root, "big-mod"), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("fsbench: modify big-mod: %w", err)
	}
	defer f.Close()
	buf := make([]byte, pageSize)
	if _, err := f.ReadAt(buf, 0); err != nil {
		return fmt.Errorf("fsbench: modify big-mod: %w", err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("fsbench: modify big-mod: %w", err)
	}
	return f.Close()
}

// makeRepo makes base/repo: a git repository of GitFiles files (from the
// Go distribution's source tree when there is one), committed and packed,
// with up to 20 Go files changed and not committed.
func (h *harness) makeRepo(ctx context.Context) error {
	repo := filepath.Join(h.base, "repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		return err
	}
	var src string
	if h.goBin != "" {
		if out, err := exec.CommandContext(ctx, h.goBin, "env", "GOROOT").Output(); err == nil {
			src = filepath.Join(strings.TrimSpace(string(out)), "src")
		}
	}
	changed, err := fillRepo(src, repo, h.cfg.GitFiles)
	if err != nil {
		return err
	}
	git := func(args ...string) error {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = repo
		cmd.Env = gitEnv(h.tmp)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"commit", "-q", "-m", "fsbench base"},
		{"repack", "-a", "-d", "-q"},
		{"prune"},
	} {
		if err := git(args...); err != nil {
			return err
		}
	}
	n := 0
	for i, p := range changed {
		if i%max(1, len(changed)/maxRepoChanges) != 0 || n == maxRepoChanges {
			continue
		}
		f, err := os.OpenFile(filepath.Join(repo, p), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return err
		}
		_, err = f.WriteString("\n// fsbench change\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		n++
	}
	h.repoChanges = n
	// Refresh the index now, so no system's git run has to rewrite it.
	return git("update-index", "-q", "--refresh")
}

// fillRepo copies up to n regular files (at most 128 KiB each, no dot
// files) from src into dst, or generates them when src is unusable, and
// returns the Go files among them (candidates for changes).
func fillRepo(src, dst string, n int) ([]string, error) {
	var goFiles []string
	count := 0
	if src != "" {
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil || count >= n {
				return filepath.SkipAll
			}
			if strings.HasPrefix(d.Name(), ".") && p != src {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				return nil
			}
			info, err := d.Info()
			if err != nil || info.Size() > 128<<10 {
				return nil
			}
			rel, _ := filepath.Rel(src, p)
			if err := copyFile(p, filepath.Join(dst, rel)); err != nil {
				return err
			}
			count++
			if strings.HasSuffix(rel, ".go") {
				goFiles = append(goFiles, rel)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for ; count < n; count++ {
		rel := filepath.Join(fmt.Sprintf("gen%02d", count/100), fmt.Sprintf("file%05d.go", count))
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, rel)), 0o755); err != nil {
			return nil, err
		}
		body := fmt.Sprintf("package gen\n\n// F%d is generated.\nfunc F%d(x int) int {\n\treturn x * %d\n}\n", count, count, count)
		if err := os.WriteFile(filepath.Join(dst, rel), []byte(strings.Repeat(body, 8)), 0o644); err != nil {
			return nil, err
		}
		goFiles = append(goFiles, rel)
	}
	return goFiles, nil
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm()|0o200)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyTree copies the files, directories and symlinks of src into dst,
// leaving out .git.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, target)
		case d.Type().IsRegular():
			return copyFile(p, target)
		}
		return nil
	})
}

// makeGoMod copies the Go module into base/gomod (or generates one) and
// builds it once there, so the dependencies are downloaded and compiled
// before any system is timed. A module that does not build skips go-build.
func (h *harness) makeGoMod(ctx context.Context) error {
	if h.goBin == "" {
		return nil
	}
	dst := filepath.Join(h.base, "gomod")
	src := h.cfg.GoModule
	if src == "" {
		if out, err := exec.CommandContext(ctx, h.goBin, "env", "GOMOD").Output(); err == nil {
			if gm := strings.TrimSpace(string(out)); gm != "" && gm != os.DevNull {
				src = filepath.Dir(gm)
			}
		}
	}
	var err error
	if src != "" {
		err = copyTree(src, dst)
	} else {
		err = generateModule(dst)
	}
	if err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(dst, "go.mod"))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(gomod), "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			h.goModPath = strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	if h.goModPath == "" {
		return fmt.Errorf("%s/go.mod names no module", src)
	}
	if h.cfg.GoCache == "" {
		out, err := exec.CommandContext(ctx, h.goBin, "env", "GOCACHE").Output()
		if err != nil {
			return fmt.Errorf("go env GOCACHE: %w", err)
		}
		h.cfg.GoCache = strings.TrimSpace(string(out))
	}
	cmd := exec.CommandContext(ctx, h.goBin, "build", "-o", os.DevNull, "./...")
	cmd.Dir = dst
	cmd.Env = goEnv(h.cfg.GoCache)
	if out, err := cmd.CombinedOutput(); err != nil {
		h.cfg.Logger.Warn("go module does not build; go-build will be skipped", "module", src, "err", err)
		h.goSkip = fmt.Sprintf("module %s does not build: %v: %s", src, err, bytes.TrimSpace(out))
	}
	return nil
}

// generateModule writes a small Go module that imports nothing outside
// itself, so it compiles in a second from any cache.
func generateModule(dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dst, "go.mod"), []byte("module example.com/fsbenchmod\n\ngo 1.22\n"), 0o644); err != nil {
		return err
	}
	for p := range 8 {
		dir := filepath.Join(dst, fmt.Sprintf("p%d", p))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "package p%d\n\n", p)
		if p > 0 {
			fmt.Fprintf(&b, "import \"example.com/fsbenchmod/p%d\"\n\n", p-1)
		}
		for f := range 40 {
			fmt.Fprintf(&b, "func F%d(x []int) (s int) {\n\tfor i, v := range x {\n\t\tswitch {\n\t\tcase v%%3 == 0:\n\t\t\ts += v * i\n\t\tdefault:\n\t\t\ts -= v\n\t\t}\n\t}\n", f)
			if p > 0 {
				fmt.Fprintf(&b, "\ts += p%d.F%d(x[:len(x)/2])\n", p-1, f)
			}
			b.WriteString("\treturn s\n}\n\n")
		}
		if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func gitEnv(home string) []string {
	env := []string{
		"HOME=" + home, "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=fsbench", "GIT_AUTHOR_EMAIL=fsbench@localhost",
		"GIT_COMMITTER_NAME=fsbench", "GIT_COMMITTER_EMAIL=fsbench@localhost",
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GIT_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "LC_ALL=") {
			env = append(env, kv)
		}
	}
	return env
}

func goEnv(cache string) []string {
	env := []string{"GOCACHE=" + cache, "GOFLAGS=-buildvcs=false", "GOWORK=off", "GOTOOLCHAIN=local"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "GOCACHE", "GOFLAGS", "GOWORK", "GOTOOLCHAIN":
		default:
			env = append(env, kv)
		}
	}
	return env
}
