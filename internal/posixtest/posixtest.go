package posixtest

import (
	"os"
	"path/filepath"
	"testing"
)

// Env is the filesystem under test, as the suite sees it.
type Env interface {
	// Dir returns a fresh, empty directory inside the filesystem under test.
	// Every component of its path must be searchable by uid 65534, so the
	// permission cases can reach it (a FUSE mount needs allow_other).
	Dir(t *testing.T) string
	// Lower makes a fresh, empty directory in a layer below the one under
	// test, runs setup on it there, and then returns the path of the same
	// directory as seen from the layer under test (for a branching
	// filesystem: a branch taken after setup ran). The files setup made are
	// then "lower" files: the first write to one is a copy-up. An Env
	// without layers runs setup in place and returns its argument. Setup
	// reports its own failures on t. The same searchability rule as Dir's
	// applies.
	Lower(t *testing.T, setup func(dir string)) string
}

// StrictEnv is an Env that can say its filesystem must support every
// feature the suite probes. Where a case finds a feature unsupported (the
// filesystem answers ENOTSUP, EOPNOTSUPP or ENOSYS, or the equivalent for
// that call) it skips with the reason; on an Env whose Strict returns true
// it fails instead.
type StrictEnv interface {
	Env
	Strict() bool
}

// Case is one conformance check. It runs in a fresh directory dir: made by
// Env.Lower and populated there by Lower when Lower is set, else made
// empty by Env.Dir.
type Case struct {
	Name string
	// Lower, if set, populates the case's directory in a lower layer
	// before the layer under test is taken (see Env.Lower).
	Lower func(t *testing.T, dir string)
	// Run makes the checks, as the test process's own user (root, for the
	// whole suite to run).
	Run func(t *testing.T, dir string)
	// Nobody, if set, runs after Run in a child process whose uids, gids and
	// supplementary groups are all 65534 and which holds no capabilities
	// (see Main). A returned error fails the case. Cases with Nobody skip
	// when the test process is not root (and fail under ARBOR_TEST_REQUIRE).
	Nobody func(dir string) error
}

// Cases returns every case of the suite, each time a fresh slice. Their
// unsupported features always skip (as for an Env that is not strict).
func Cases() []Case { return (&suite{}).cases() }

// Run runs every case against env, each as a subtest named by the case.
func Run(t *testing.T, env Env) {
	s := &suite{}
	if se, ok := env.(StrictEnv); ok {
		s.strict = se.Strict()
	}
	known, _ := env.(KnownLimits)
	for _, c := range s.cases() {
		t.Run(c.Name, func(t *testing.T) {
			if known != nil {
				if why := known.KnownLimit(c.Name); why != "" {
					t.Skip("known limit of this filesystem: " + why)
				}
			}
			runCase(t, env, c)
		})
	}
}

// KnownLimits is implemented by an Env whose filesystem documents that it
// departs from POSIX in a case: that case is skipped with the reason, which
// the filesystem's docs must carry too.
type KnownLimits interface {
	KnownLimit(caseName string) string
}

// runCase runs one case: its directory, Run, then Nobody in a child.
func runCase(t *testing.T, env Env, c Case) {
	if c.Nobody != nil {
		requireRoot(t)
	}
	var dir string
	if c.Lower != nil {
		dir = env.Lower(t, func(d string) { c.Lower(t, d) })
	} else {
		dir = env.Dir(t)
	}
	if c.Run != nil {
		c.Run(t, dir)
	}
	if c.Nobody != nil {
		runNobody(t, c.Name, dir)
	}
}

// TempDirEnv is an Env over plain directories of the host's filesystem,
// made with t.TempDir. It has no layers: Lower runs setup in place.
type TempDirEnv struct {
	// Root, if set, is a directory under which the fresh directories are
	// made (for example, one on tmpfs); else t.TempDir's.
	Root string
	// StrictFeatures makes unsupported features fail (see StrictEnv).
	StrictFeatures bool
}

var _ StrictEnv = TempDirEnv{}

// Strict reports e.StrictFeatures.
func (e TempDirEnv) Strict() bool { return e.StrictFeatures }

// Dir returns a fresh empty directory, removed when t ends. The directories
// t.TempDir makes are mode 0700; Dir opens them (and its own) to 0755 so
// uid 65534 can reach the case's files.
func (e TempDirEnv) Dir(t *testing.T) string {
	t.Helper()
	if e.Root == "" {
		d := t.TempDir()
		for _, p := range []string{filepath.Dir(d), d} {
			if err := os.Chmod(p, 0o755); err != nil {
				t.Fatalf("open %s to uid 65534: %v", p, err)
			}
		}
		return d
	}
	d, err := os.MkdirTemp(e.Root, "posixtest-")
	if err != nil {
		t.Fatalf("fresh dir under %s: %v", e.Root, err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatalf("open %s to uid 65534: %v", d, err)
	}
	return d
}

// Lower runs setup on a fresh directory and returns that directory.
func (e TempDirEnv) Lower(t *testing.T, setup func(dir string)) string {
	t.Helper()
	d := e.Dir(t)
	setup(d)
	return d
}
