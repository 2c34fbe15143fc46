package fsbench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Units of Result.Value.
const (
	unitMiBps = "MiB/s"
	unitKIOPS = "kIOPS"
	unitUsOp  = "µs/op"
	unitMs    = "ms"
)

// What a case needs in the main base.
const (
	useBig = 1 << iota
	useFiles
	useRepo
	useGoMod
)

const (
	smallFileSize = 1 << 10 // files/ entries and created files
	ioBlock       = 1 << 20 // sequential I/O buffer
	pageSize      = 4 << 10 // random read size
	branchesPer   = 10      // branches created per branch-create round
)

// caseDef is one measured operation.
type caseDef struct {
	name         string
	unit         string
	higherBetter bool
	// cold cases drop the caches before each round; warmup cases run one
	// untimed round first.
	cold, warmup bool
	uses         int
	modified     bool // reads big-mod, which must be copied up first
	syncFirst    bool // writes a lot: start each round with the disk synced
	perLap       bool // each timed op is a sample (branch-create)
	brancher     bool
	// branchBase, when set, makes the case run on its own base with that
	// many files instead of the main base.
	branchBase func(Config) int
	needs      func(*env) string // extra skip reason, "" to run
	// run does one round, timing its measured part with e.sw, and returns
	// the ops and bytes of the round.
	run func(ctx context.Context, e *env) (ops int, bytes int64, err error)
}

// env is what a case round sees.
type env struct {
	h     *harness
	sys   System
	root  string // the system's root
	base  string // the base it was set up over (never written by cases)
	round int
	sw    stopwatch
}

func (c *caseDef) skipReason(e *env) string {
	if c.brancher {
		if _, ok := e.sys.(Brancher); !ok {
			return "not a Brancher"
		}
	}
	if c.needs != nil {
		return c.needs(e)
	}
	return ""
}

// work returns a fresh directory under root/.fsbench for one round.
func (e *env) work(name string) (string, error) {
	d := filepath.Join(e.root, ".fsbench", fmt.Sprintf("%s-%d", name, e.round))
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", err
	}
	return d, nil
}

// cleanWork removes root/.fsbench, where rounds write.
func (e *env) cleanWork() error {
	return os.RemoveAll(filepath.Join(e.root, ".fsbench"))
}

var cases = buildCases()

func caseByName(name string) *caseDef {
	for _, c := range cases {
		if c.name == name {
			return c
		}
	}
	return nil
}

// CaseNames lists every case in the order they run.
func CaseNames() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	return out
}

func selectCases(names []string) []*caseDef {
	if len(names) == 0 {
		return cases
	}
	var out []*caseDef
	for _, c := range cases {
		for _, n := range names {
			if c.name == n {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func buildCases() []*caseDef {
	cs := []*caseDef{
		{name: "seqwrite", unit: unitMiBps, higherBetter: true, syncFirst: true, uses: useBig, run: runSeqWrite},
		{name: "write-4k", unit: unitUsOp, syncFirst: true, run: runSmallWrites},
		{name: "seqread-cold", unit: unitMiBps, higherBetter: true, cold: true, uses: useBig, run: seqRead("big")},
		{name: "seqread-warm", unit: unitMiBps, higherBetter: true, warmup: true, uses: useBig, run: seqRead("big")},
		{name: "seqread-modified-warm", unit: unitMiBps, higherBetter: true, warmup: true, uses: useBig, modified: true, run: seqRead("big-mod")},
		{name: "randread-cold", unit: unitKIOPS, higherBetter: true, cold: true, uses: useBig, run: randRead("big", 4096, false)},
		{name: "randread-warm", unit: unitKIOPS, higherBetter: true, uses: useBig, run: randRead("big", 65536, true)},
		{name: "randread-modified-warm", unit: unitKIOPS, higherBetter: true, uses: useBig, modified: true, run: randRead("big-mod", 65536, true)},
		{name: "stat-cold", unit: unitUsOp, cold: true, uses: useFiles, run: runStat},
		{name: "stat-warm", unit: unitUsOp, warmup: true, uses: useFiles, run: runStat},
		{name: "readdir-cold", unit: unitMs, cold: true, uses: useFiles, run: runReaddir},
		{name: "readdir-warm", unit: unitMs, warmup: true, uses: useFiles, run: runReaddir},
		{name: "create", unit: unitUsOp, syncFirst: true, uses: useFiles, run: runCreate},
		{name: "open-read", unit: unitUsOp, warmup: true, uses: useFiles, run: runOpenRead},
		{name: "git-status", unit: unitMs, warmup: true, uses: useRepo, needs: needProgram("git"), run: runGit("status", "--porcelain")},
		{name: "git-diff", unit: unitMs, warmup: true, uses: useRepo, needs: needProgram("git"), run: runGit("diff", "--no-ext-diff", "--no-color")},
		{name: "go-build", unit: unitMs, warmup: true, uses: useGoMod, needs: needGo, run: runGoBuild},
	}
	for _, b := range []struct {
		name string
		n    func(Config) int
	}{
		{"small", func(Config) int { return 100 }},
		{"medium", func(c Config) int { return c.Files }},
		{"large", func(c Config) int { return 10 * c.Files }},
	} {
		cs = append(cs, &caseDef{name: "branch-create-" + b.name, unit: unitUsOp, brancher: true, perLap: true, syncFirst: true, branchBase: b.n, run: runBranchCreate})
	}
	for _, size := range []struct {
		name string
		n    func(Config) int64
	}{
		{"1K", func(Config) int64 { return 1 << 10 }},
		{"1M", func(Config) int64 { return 1 << 20 }},
		{"100M", func(c Config) int64 { return min(100<<20, c.Size) }},
	} {
		for _, v := range []struct {
			suffix string
			opts   CommitOptions
		}{
			{"", CommitOptions{}},
			{"-durable", CommitOptions{Durable: true}},
			{"-base", CommitOptions{IntoBase: true}},
			{"-base-durable", CommitOptions{IntoBase: true, Durable: true}},
		} {
			cs = append(cs, &caseDef{name: "commit-" + size.name + v.suffix, unit: unitUsOp, brancher: true, syncFirst: true, run: runCommit(size.n, v.opts)})
		}
		cs = append(cs, &caseDef{name: "abort-" + size.name, unit: unitUsOp, brancher: true, syncFirst: true, run: runAbort(size.n)})
	}
	return cs
}

// pattern is a deterministic, incompressible block for file contents.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// writeBig writes size bytes of pattern to f.
func writeBig(f *os.File, size int64) error {
	buf := pattern(ioBlock, 1)
	for off := int64(0); off < size; off += ioBlock {
		n := min(int64(ioBlock), size-off)
		// Vary each block so no two are the same.
		buf[0], buf[1] = byte(off>>20), byte(off>>28)
		if _, err := f.Write(buf[:n]); err != nil {
			return err
		}
	}
	return nil
}

func runSeqWrite(ctx context.Context, e *env) (int, int64, error) {
	dir, err := e.work("seqwrite")
	if err != nil {
		return 0, 0, err
	}
	defer e.cleanWork()
	size := e.h.cfg.Size
	e.sw.start()
	f, err := os.OpenFile(filepath.Join(dir, "w"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		e.sw.stop()
		return 0, 0, err
	}
	err = writeBig(f, size)
	if err == nil {
		err = unix.Fdatasync(int(f.Fd()))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	e.sw.stop()
	return 1, size, err
}

func seqRead(name string) func(context.Context, *env) (int, int64, error) {
	return func(ctx context.Context, e *env) (int, int64, error) {
		buf := make([]byte, ioBlock)
		e.sw.start()
		n, err := readAll(filepath.Join(e.root, name), buf)
		e.sw.stop()
		if err == nil && n != e.h.cfg.Size {
			err = fmt.Errorf("read %d bytes of %s, want %d", n, name, e.h.cfg.Size)
		}
		return 1, n, err
	}
}

func readAll(path string, buf []byte) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var total int64
	for {
		n, err := f.Read(buf)
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// randRead times ops aligned 4 KiB preads at random offsets; warm first
// reads the whole file (untimed) so every page is cached.
func randRead(name string, ops int, warm bool) func(context.Context, *env) (int, int64, error) {
	return func(ctx context.Context, e *env) (int, int64, error) {
		path := filepath.Join(e.root, name)
		if warm {
			if _, err := readAll(path, make([]byte, ioBlock)); err != nil {
				return 0, 0, err
			}
		}
		f, err := os.Open(path)
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		pages := uint64(e.h.cfg.Size / pageSize)
		r := rand.New(rand.NewPCG(uint64(e.round), 42))
		offs := make([]int64, ops)
		for i := range offs {
			offs[i] = int64(r.Uint64N(pages)) * pageSize
		}
		buf := make([]byte, pageSize)
		fd := int(f.Fd())
		e.sw.start()
		for _, off := range offs {
			n, err := unix.Pread(fd, buf, off)
			if err != nil || n != pageSize {
				e.sw.stop()
				return 0, 0, fmt.Errorf("pread %s at %d: %d bytes, %v", name, off, n, err)
			}
		}
		e.sw.stop()
		return ops, int64(ops) * pageSize, nil
	}
}

func fileName(i int) string { return fmt.Sprintf("f%06d", i) }

// smallWrites is how many 4 KiB writes write-4k makes (16 MiB).
const smallWrites = 4096

// runSmallWrites times 4 KiB writes to a new file, as a compiler or a log
// writes (no fsync): per write, whatever the filesystem asks for besides
// the data (with passthrough, the data costs no request).
func runSmallWrites(ctx context.Context, e *env) (int, int64, error) {
	dir, err := e.work("write-4k")
	if err != nil {
		return 0, 0, err
	}
	defer e.cleanWork()
	fd, err := unix.Open(filepath.Join(dir, "w"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Close(fd)
	buf := pattern(pageSize, 3)
	e.sw.start()
	for range smallWrites {
		if _, err := unix.Write(fd, buf); err != nil {
			e.sw.stop()
			return 0, 0, fmt.Errorf("write: %w", err)
		}
	}
	e.sw.stop()
	return smallWrites, smallWrites * pageSize, nil
}

func runStat(ctx context.Context, e *env) (int, int64, error) {
	n := e.h.cfg.Files
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(e.root, "files", fileName(i))
	}
	var st unix.Stat_t
	e.sw.start()
	for _, p := range paths {
		if err := unix.Lstat(p, &st); err != nil {
			e.sw.stop()
			return 0, 0, fmt.Errorf("lstat %s: %w", p, err)
		}
	}
	e.sw.stop()
	return n, 0, nil
}

func runReaddir(ctx context.Context, e *env) (int, int64, error) {
	e.sw.start()
	f, err := os.Open(filepath.Join(e.root, "files"))
	if err != nil {
		e.sw.stop()
		return 0, 0, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	e.sw.stop()
	if err == nil && len(names) != e.h.cfg.Files {
		err = fmt.Errorf("readdir: %d entries, want %d", len(names), e.h.cfg.Files)
	}
	return 1, 0, err
}

func runCreate(ctx context.Context, e *env) (int, int64, error) {
	dir, err := e.work("create")
	if err != nil {
		return 0, 0, err
	}
	defer e.cleanWork()
	n := e.h.cfg.Files
	paths := make([]string, n)
	for i := range paths {
		paths[i] = filepath.Join(dir, fileName(i))
	}
	data := pattern(smallFileSize, 2)
	e.sw.start()
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err == nil {
			_, err = unix.Write(fd, data)
			if cerr := unix.Close(fd); err == nil {
				err = cerr
			}
		}
		if err != nil {
			e.sw.stop()
			return 0, 0, fmt.Errorf("create %s: %w", p, err)
		}
	}
	e.sw.stop()
	return n, int64(n) * smallFileSize, nil
}

func runOpenRead(ctx context.Context, e *env) (int, int64, error) {
	n := e.h.cfg.Files
	p := filepath.Join(e.root, "files", fileName(0))
	buf := make([]byte, 2*smallFileSize)
	e.sw.start()
	for range n {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			e.sw.stop()
			return 0, 0, err
		}
		m, err := unix.Read(fd, buf)
		unix.Close(fd)
		if err != nil || m != smallFileSize {
			e.sw.stop()
			return 0, 0, fmt.Errorf("read %s: %d bytes, %v", p, m, err)
		}
	}
	e.sw.stop()
	return n, int64(n) * smallFileSize, nil
}

func needProgram(name string) func(*env) string {
	return func(*env) string {
		if _, err := exec.LookPath(name); err != nil {
			return name + " is not installed"
		}
		return ""
	}
}

func needGo(e *env) string {
	if e.h.goBin == "" {
		return "no go command found"
	}
	return e.h.goSkip
}

// runGit times one git command in root/repo and checks that it sees the
// base's uncommitted changes.
func runGit(args ...string) func(context.Context, *env) (int, int64, error) {
	return func(ctx context.Context, e *env) (int, int64, error) {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = filepath.Join(e.root, "repo")
		cmd.Env = gitEnv(e.h.tmp)
		cmd.Stdout = &out
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		e.sw.start()
		err := cmd.Run()
		e.sw.stop()
		if err != nil {
			return 0, 0, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
		}
		if got := bytes.Count(out.Bytes(), []byte("fsbench change")) + bytes.Count(out.Bytes(), []byte(" M ")); got < e.h.repoChanges {
			return 0, 0, fmt.Errorf("git %s saw %d changes, want %d:\n%s", args[0], got, e.h.repoChanges, out.Bytes())
		}
		return 1, 0, nil
	}
}

// runGoBuild times `go build ./...` of root/gomod. A fresh no-op -D flag
// on the module's own packages makes them compile every round while the
// standard library and dependencies come from the cache.
func runGoBuild(ctx context.Context, e *env) (int, int64, error) {
	e.h.nonce++
	token := fmt.Sprintf("fsbench%d.%d.%d", os.Getpid(), e.h.runID, e.h.nonce)
	cmd := exec.CommandContext(ctx, e.h.goBin, "build", "-o", os.DevNull,
		"-gcflags="+e.h.goModPath+"/...=-D="+token, "./...")
	cmd.Dir = filepath.Join(e.root, "gomod")
	cmd.Env = goEnv(e.h.cfg.GoCache)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	e.sw.start()
	err := cmd.Run()
	e.sw.stop()
	if err != nil {
		return 0, 0, fmt.Errorf("go build: %w: %s", err, out.Bytes())
	}
	return 1, 0, nil
}

func runBranchCreate(ctx context.Context, e *env) (int, int64, error) {
	br := e.sys.(Brancher)
	var made []Branch
	defer func() {
		for _, b := range made {
			_ = b.Abort(ctx)
		}
	}()
	for range branchesPer {
		e.sw.start()
		b, err := br.Branch(ctx)
		e.stopFor(e.sys)
		if err != nil {
			return 0, 0, fmt.Errorf("branch: %w", err)
		}
		made = append(made, b)
		if _, err := os.Lstat(filepath.Join(b.Root(), "d000", fileName(0))); err != nil {
			return 0, 0, fmt.Errorf("branch does not show the base: %w", err)
		}
	}
	var errs []error
	for _, b := range made {
		errs = append(errs, b.Abort(ctx))
	}
	made = nil
	return branchesPer, 0, errors.Join(errs...)
}

// branchWithChange makes a branch (untimed) and writes size bytes into it.
func branchWithChange(ctx context.Context, e *env, size int64) (Branch, string, error) {
	b, err := e.sys.(Brancher).Branch(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("branch: %w", err)
	}
	rel := filepath.Join(".fsbench", fmt.Sprintf("change-%d", e.round))
	dir := filepath.Join(b.Root(), rel)
	err = os.MkdirAll(dir, 0o755)
	var f *os.File
	if err == nil {
		f, err = os.Create(filepath.Join(dir, "data"))
	}
	if err == nil {
		err = writeBig(f, size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		_ = b.Abort(ctx)
		return nil, "", err
	}
	return b, rel, nil
}

func runCommit(size func(Config) int64, opts CommitOptions) func(context.Context, *env) (int, int64, error) {
	return func(ctx context.Context, e *env) (int, int64, error) {
		n := size(e.h.cfg)
		b, _, err := branchWithChange(ctx, e, n)
		if err != nil {
			return 0, 0, err
		}
		e.sw.start()
		err = b.Commit(ctx, opts)
		e.stopFor(e.sys)
		if err != nil {
			_ = b.Abort(ctx)
			return 0, 0, fmt.Errorf("commit: %w", err)
		}
		// What was committed into the base (or a parent shown at root)
		// is removed through the system's root.
		return 1, n, e.cleanWork()
	}
}

func runAbort(size func(Config) int64) func(context.Context, *env) (int, int64, error) {
	return func(ctx context.Context, e *env) (int, int64, error) {
		n := size(e.h.cfg)
		b, rel, err := branchWithChange(ctx, e, n)
		if err != nil {
			return 0, 0, err
		}
		e.sw.start()
		err = b.Abort(ctx)
		e.stopFor(e.sys)
		if err != nil {
			return 0, 0, fmt.Errorf("abort: %w", err)
		}
		if _, err := os.Lstat(filepath.Join(e.root, rel)); err == nil {
			return 0, 0, fmt.Errorf("abort: the aborted change is visible in the root")
		}
		return 1, n, nil
	}
}
