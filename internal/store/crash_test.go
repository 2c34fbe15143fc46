package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// The crash tests re-exec the test binary as a helper (TestCrashHelper)
// that works on a store until it is killed: by its own crash point
// (ARBOR_STORE_CRASH) or by the test's SIGKILL at a random time.
const (
	envHelper = "ARBOR_STORE_TEST_HELPER" // commit | loop
	envDir    = "ARBOR_STORE_TEST_DIR"
	envBase   = "ARBOR_STORE_TEST_BASE"
	envStart  = "ARBOR_STORE_TEST_START"
)

// TestCrashHelper is not a test: it is the body of the helper process.
func TestCrashHelper(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("the crash tests' helper process; runs only under them")
	}
	s, err := Open(Config{Dir: os.Getenv(envDir), Base: os.Getenv(envBase)})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	switch mode {
	case "commit":
		_, err := s.Commit("c", true)
		fmt.Println("commit returned:", err)
		os.Exit(4) // the crash point should have killed us
	case "mainwrite": // main writes a file a fork still shows
		_, err := s.CopyUp(mustBranch(s, Main), "a")
		fmt.Println("copy-up returned:", err)
		os.Exit(4)
	case "forkwriter": // p forks while it holds a open for writing
		real, err := s.CopyUp(mustBranch(s, "p"), "a")
		if err != nil {
			fmt.Println("copy-up:", err)
			os.Exit(3)
		}
		s.OpenWrite(real)
		err = s.Fork("p", "c")
		fmt.Println("fork returned:", err)
		os.Exit(4)
	case "loop":
		start, _ := strconv.Atoi(os.Getenv(envStart))
		if err := crashLoop(s, start); err != nil {
			fmt.Println("loop:", err)
			os.Exit(5)
		}
	}
	os.Exit(6)
}

const loopFiles = 5 // files each commit of the loop writes, all with its token

// crashLoop commits numbered tokens into main, alternately straight from a
// child of main and through a grandchild committed into its parent first,
// printing "ack N" once commit N returned. Each commit writes token N into
// t/f0..f4 and makes log/N.
func crashLoop(s *Store, start int) error {
	for _, bi := range s.Branches() { // what a previous kill left behind
		if bi.Name != Main && bi.Parent == Main || bi.Name != Main && bi.Stale {
			if err := s.Abort(bi.Name); err != nil && !errors.Is(err, api.ErrNotFound) {
				return err
			}
		}
	}
	for n := start; ; n++ {
		tok := strconv.Itoa(n)
		c, sib := "c"+tok, "s"+tok
		top := c
		if err := s.Fork(Main, c, sib); err != nil {
			return err
		}
		if n%2 == 1 {
			top = c
			c = "g" + tok
			if err := s.Fork(top, c); err != nil {
				return err
			}
		}
		cb, err := s.Branch(c)
		if err != nil {
			return err
		}
		sb, _ := s.Branch(sib)
		if err := writeErr(s, sb, "t/f0", "sibling"); err != nil {
			return err
		}
		for i := range loopFiles {
			if err := writeErr(s, cb, fmt.Sprintf("t/f%d", i), tok); err != nil {
				return err
			}
		}
		if err := writeErr(s, cb, "log/"+tok, tok); err != nil {
			return err
		}
		if c != top {
			if _, err := s.Commit(c, n%4 == 1); err != nil {
				return err
			}
		}
		if _, err := s.Commit(top, n%3 == 0); err != nil {
			return err
		}
		fmt.Printf("ack %d\n", n)
		if err := s.Abort(sib); err != nil {
			return err
		}
	}
}

// helper starts the helper process in the given mode.
func helper(ctx context.Context, t *testing.T, mode, dir, base string, env ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envDir+"="+dir, envBase+"="+base)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	return cmd
}

func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestCrashAtCommitPoints: a commit into main killed after its journal is
// written, or after its changes are applied, is completed by the next Open:
// the base has every change, the child is gone, its sibling stale.
func TestCrashAtCommitPoints(t *testing.T) {
	for _, point := range []string{"journaled", "applied"} {
		t.Run(point, func(t *testing.T) {
			f := newFixture(t, isoBase)
			f.fork(Main, "c", "sib")
			c := f.br("c")
			f.write(c, "a", "A")
			f.rm(c, "b")
			f.write(c, "d/new", "N")
			f.rename(c, "other", "other2")
			f.rm(c, "d/e/z")
			for i := range 20 {
				f.write(c, fmt.Sprintf("many/f%d", i), "M")
			}
			f.write(f.br("sib"), "a", "sib")
			f.s.Close()
			f.s = nil

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := helper(ctx, t, "commit", f.dir, f.base, "ARBOR_STORE_CRASH="+point)
			out, err := cmd.Output()
			if !killedBySIGKILL(err) {
				t.Fatalf("helper did not die at %s: %v, output %q", point, err, out)
			}
			f.open()
			want := map[string]string{
				"a": "A", "b": "ENOENT", "d/new": "N", "d/x": "x0", "d/e/y": "y0", "d/e/z": "ENOENT",
				"other/w": "ENOENT", "other2/w": "w0", "keep": "k0",
			}
			for i := range 20 {
				want[fmt.Sprintf("many/f%d", i)] = "M"
			}
			for path, w := range want {
				if got := f.baseRead(path); got != w {
					t.Errorf("base %s = %q, want %q (the commit must be complete)", path, got, w)
				}
			}
			if _, err := os.Lstat(filepath.Join(f.base, "other")); !os.IsNotExist(err) {
				t.Errorf("base still has other/: %v", err)
			}
			if _, err := f.s.Branch("c"); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("the committed child is still a branch: %v", err)
			}
			if !f.s.IsStale(f.br("sib")) {
				t.Errorf("the sibling is not stale after the replay")
			}
			// The store works on: a new fork sees the commit.
			f.fork(Main, "after")
			if got := f.read(f.br("after"), "many/f7"); got != "M" {
				t.Errorf("a fork after the replay reads %q", got)
			}
			if err := f.s.Abort("sib"); err != nil {
				t.Fatal(err)
			}
			if err := f.s.Abort("after"); err != nil {
				t.Fatal(err)
			}
			f.reopen()
			if d := f.layerDirs(); len(d) != 0 {
				t.Errorf("layers left after the replay: %v", d)
			}
		})
	}
}

func mustBranch(s *Store, name string) *Branch {
	b, err := s.Branch(name)
	if err != nil {
		panic(err)
	}
	return b
}

// TestCrashInPreserve: a crash while a file moves out of the way of a
// write (main's write under a live fork, a fork of a branch holding an open
// writer) loses nothing: the writer's side still has the whole file, the
// fork still sees the fork-time bytes, and no stray copy shows up.
func TestCrashInPreserve(t *testing.T) {
	for _, mode := range []string{"mainwrite", "forkwriter"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t, isoBase)
			writer := Main
			if mode == "forkwriter" {
				f.fork(Main, "p")
				f.write(f.br("p"), "a", "pa")
				writer = "p"
			} else {
				f.fork(Main, "c")
			}
			want := f.read(f.br(writer), "a")
			f.s.Close()
			f.s = nil
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := helper(ctx, t, mode, f.dir, f.base, "ARBOR_STORE_CRASH=swapped").Output()
			if !killedBySIGKILL(err) {
				t.Fatalf("helper did not die at the swap: %v, output %q", err, out)
			}
			f.open()
			if got := f.read(f.br(writer), "a"); got != want {
				t.Errorf("%s reads a = %q after the crash, want %q", writer, got, want)
			}
			if mode == "mainwrite" {
				if got := f.baseRead("a"); got != "a0" {
					t.Errorf("base a = %q after the crash", got)
				}
				if got := f.read(f.br("c"), "a"); got != "a0" {
					t.Errorf("the fork reads a = %q", got)
				}
				if got := f.ls(f.br("c"), ""); got != "a b d/ empty/ keep other/" {
					t.Errorf("the fork lists %q", got)
				}
			} else if got := f.read(f.br("c"), "a"); got != "pa" {
				// The fork was saved before the writer's file moved.
				t.Errorf("the fork reads a = %q, want %q", got, "pa")
			}
			if ents, _ := os.ReadDir(filepath.Join(f.dir, "tmp")); len(ents) != 0 {
				t.Errorf("%d copies left in tmp", len(ents))
			}
			// And the writer's side keeps working.
			f.write(f.br(writer), "a", "after")
			if mode == "mainwrite" {
				if got := f.read(f.br("c"), "a"); got != "a0" {
					t.Errorf("the fork reads a = %q after main wrote", got)
				}
			}
		})
	}
}

// TestCrashLoop kills a helper that forks, writes and commits in a loop at
// random times; after each kill, every acknowledged commit is in the base
// and no commit is there in part.
func TestCrashLoop(t *testing.T) {
	base := t.TempDir()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(base, "t"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range loopFiles {
		os.WriteFile(filepath.Join(base, fmt.Sprintf("t/f%d", i)), []byte("init"), 0o644)
	}
	budget := time.Now().Add(8 * time.Second)
	maxAck, kills, total := -1, 0, 0
	for round := 0; round < 8 && time.Now().Before(budget); round++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := helper(ctx, t, "loop", dir, base, fmt.Sprintf("%s=%d", envStart, (round+1)*100000))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		acks := make(chan int, 1000)
		go func() {
			defer close(acks)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if n, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
					v, _ := strconv.Atoi(n)
					acks <- v
				} else {
					t.Logf("helper: %s", sc.Text())
				}
			}
		}()
		// Let it get going (at least one commit), then kill it at a random time.
		first := true
		timer := time.NewTimer(5 * time.Second)
	wait:
		for {
			select {
			case n, ok := <-acks:
				if !ok {
					break wait
				}
				maxAck, total = max(maxAck, n), total+1
				if first {
					first = false
					timer.Reset(time.Duration(rand.IntN(300)) * time.Millisecond)
				}
			case <-timer.C:
				cmd.Process.Signal(syscall.SIGKILL)
				timer.Reset(5 * time.Second)
			}
		}
		err = cmd.Wait()
		cancel()
		if !killedBySIGKILL(err) {
			t.Fatalf("round %d: helper ended with %v, not our SIGKILL", round, err)
		}
		kills++

		s, err := Open(Config{Dir: dir, Base: base})
		if err != nil {
			t.Fatalf("round %d: open after the kill: %v", round, err)
		}
		checkLoopBase(t, base, maxAck)
		s.Close()
		if t.Failed() {
			t.Fatalf("round %d failed", round)
		}
	}
	t.Logf("%d kills, %d acknowledged commits", kills, total)
	if kills < 3 || total == 0 {
		t.Errorf("only %d kills and %d commits", kills, total)
	}
	// Leftover branches aborted: no layer is left on disk.
	s, err := Open(Config{Dir: dir, Base: base})
	if err != nil {
		t.Fatal(err)
	}
	for _, bi := range s.Branches() {
		if bi.Name != Main {
			if err := s.Abort(bi.Name); err != nil && !errors.Is(err, api.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
	s.Close()
	if s, err = Open(Config{Dir: dir, Base: base}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if ents, _ := os.ReadDir(filepath.Join(dir, "layers")); len(ents) != 0 {
		t.Errorf("%d layers left on disk", len(ents))
	}
}

// checkLoopBase: t/f0..f4 all hold the same token T, T is at least the last
// acknowledged one, log/T exists, and no log entry newer than T does (that
// commit would be in the base in part).
func checkLoopBase(t *testing.T, base string, maxAck int) {
	t.Helper()
	var tok string
	for i := range loopFiles {
		d, err := os.ReadFile(filepath.Join(base, fmt.Sprintf("t/f%d", i)))
		if err != nil {
			t.Errorf("t/f%d: %v", i, err)
			return
		}
		if i == 0 {
			tok = string(d)
		} else if string(d) != tok {
			t.Errorf("a partial commit: t/f0 = %q but t/f%d = %q", tok, i, d)
		}
	}
	if tok == "init" {
		if maxAck >= 0 {
			t.Errorf("commit %d was acknowledged but the base has none", maxAck)
		}
		return
	}
	n, err := strconv.Atoi(tok)
	if err != nil {
		t.Errorf("t/f0 holds %q", tok)
		return
	}
	if n < maxAck {
		t.Errorf("commit %d was acknowledged, the base has only %d", maxAck, n)
	}
	ents, _ := os.ReadDir(filepath.Join(base, "log"))
	found := false
	for _, e := range ents {
		v, err := strconv.Atoi(e.Name())
		switch {
		case err != nil:
			t.Errorf("log/%s: not a token", e.Name())
		case v == n:
			found = true
		case v > n:
			t.Errorf("log/%d is in the base but t/ has %d: a partial commit", v, n)
		}
	}
	if !found {
		t.Errorf("log/%d missing though t/ has its token", n)
	}
}
