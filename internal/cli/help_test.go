package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// run runs Main with ARBOR_HOME in a fresh directory and returns its exit
// code, stdout and stderr, and whether the home was created (by a daemon
// started, or anything else).
func run(t *testing.T, args ...string) (code int, stdout, stderr string, homeMade bool) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	t.Setenv("ARBOR_HOME", home)
	var out, errb bytes.Buffer
	code = Main(context.Background(), args, strings.NewReader(""), &out, &errb)
	_, err := os.Stat(home)
	return code, out.String(), errb.String(), err == nil
}

// commands lists every command path below root, cobra's own help and
// completion commands aside.
func commands(c *cobra.Command, path []string, out *[][]string) {
	for _, sub := range c.Commands() {
		if sub.Name() == "help" || sub.Name() == "completion" {
			continue
		}
		p := append(append([]string{}, path...), sub.Name())
		*out = append(*out, p)
		commands(sub, p, out)
	}
}

// TestEveryCommandHasHelp: every command and subcommand answers -h and
// --help with its usage, its flags and an example, exits 0, and runs
// nothing (no daemon started, no home made).
func TestEveryCommandHasHelp(t *testing.T) {
	e := &env{getenv: os.Getenv}
	var paths [][]string
	commands(e.rootCmd(), nil, &paths)
	if len(paths) < 30 {
		t.Fatalf("only %d commands found", len(paths))
	}
	paths = append(paths, nil) // arbor itself
	for _, p := range paths {
		for _, h := range []string{"-h", "--help"} {
			args := append(append([]string{}, p...), h)
			code, out, errs, made := run(t, args...)
			name := "arbor " + strings.Join(args, " ")
			if code != 0 {
				t.Errorf("%s: exit %d, stderr %q", name, code, errs)
			}
			if made {
				t.Errorf("%s: ran something (the home was created)", name)
			}
			if !strings.Contains(out, "Usage:") && !strings.Contains(out, "usage:") {
				t.Errorf("%s: no usage in %q", name, out)
			}
			if !strings.Contains(out, "Examples:") {
				t.Errorf("%s: no example in %q", name, out)
			}
			if !strings.Contains(out, "Flags:") && !strings.Contains(out, "\n  -") {
				t.Errorf("%s: no flags in %q", name, out)
			}
		}
	}
	// help COMMAND is the same.
	if code, out, _, made := run(t, "help", "tree", "fork"); code != 0 || made || !strings.Contains(out, "--labels") {
		t.Errorf("arbor help tree fork: exit %d, home made %v, %q", code, made, out)
	}
}

// TestUsageErrors: a usage error names the command, says how to get help
// and exits 2, and starts no daemon; a typo gets "did you mean".
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"frobnicate"}, []string{`arbor: unknown command "frobnicate" for "arbor"`, "Run 'arbor --help' for usage."}},
		{[]string{"mont", "x"}, []string{"Did you mean this?\n\tmount\n"}},
		{[]string{"tree", "comit", "t1", "n1"}, []string{`arbor tree: unknown command "comit"`, "Did you mean this?\n\tcommit\n"}},
		{[]string{"daemon", "stpo"}, []string{"Did you mean this?\n\tstop\n"}},
		{[]string{"demo", "coding"}, []string{`unknown command "coding" for "arbor demo"`}},
		{[]string{"create"}, []string{"arbor create: usage: arbor create NAME MOUNTPOINT"}},
		{[]string{"tree", "commit", "t1"}, []string{"arbor tree commit: usage: arbor tree commit TREE NODE"}},
		{[]string{"mount", "ws"}, []string{`arbor mount: required flag(s) "base" not set`}},
		{[]string{"tree", "nodes", "--bogus", "t1"}, []string{"arbor tree nodes: unknown flag: --bogus"}},
		{[]string{"tree", "nodes", "-o", "yaml", "t1"}, []string{`output format "yaml": want json or text`}},
		{[]string{"tree", "fork", "t1", "n1", "--label", "a", "--labels", "b,c"}, []string{"arbor tree fork: give --label (one child) or --labels (a batch), not both"}},
		{[]string{"tree", "fork", "t1", "n1", "--label", "a", "--label", "b"}, []string{`given twice ("a" and "b")`}},
		{[]string{"tree", "fork", "t1", "n1", "--labels", ""}, []string{"--labels: no labels given"}},
		{[]string{"daemon", "--allow-uid", "x"}, []string{`arbor daemon: --allow-uid: "x" is not a uid`}},
	} {
		code, _, errs, made := run(t, tc.args...)
		name := "arbor " + strings.Join(tc.args, " ")
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", name, code, errs)
		}
		if made {
			t.Errorf("%s: a usage error ran something (the home was created)", name)
		}
		for _, w := range tc.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%s: stderr %q lacks %q", name, errs, w)
			}
		}
	}
}

// TestVersion: arbor version and arbor --version print the module version
// and, when the build recorded one, the commit; version starts no daemon.
func TestVersion(t *testing.T) {
	b := readBuildInfo()
	for _, args := range [][]string{{"version"}, {"--version"}, {"daemon", "--version"}} {
		code, out, errs, made := run(t, args...)
		if code != 0 || made {
			t.Fatalf("arbor %v: exit %d, home made %v, stderr %q", args, code, made, errs)
		}
		if !strings.HasPrefix(out, "arbor "+b.Version+" ") {
			t.Errorf("arbor %v: %q does not start with the module version %q", args, out, b.Version)
		}
		if b.Commit != "" && !strings.Contains(out, b.Commit) {
			t.Errorf("arbor %v: %q lacks the commit %s", args, out, b.Commit)
		}
	}
	code, out, _, _ := run(t, "version", "-o", "json")
	if code != 0 || !strings.Contains(out, `"version":`) || !strings.Contains(out, `"go":"go`) {
		t.Errorf("arbor version -o json: exit %d, %q", code, out)
	}
}

// TestCompletion: bash, zsh and fish completion scripts, and the completion
// of a partial command.
func TestCompletion(t *testing.T) {
	for shell, head := range map[string]string{"bash": "# bash completion", "zsh": "#compdef arbor", "fish": "# fish completion"} {
		code, out, errs, _ := run(t, "completion", shell)
		if code != 0 || !strings.HasPrefix(out, head) {
			t.Errorf("arbor completion %s: exit %d, starts %q, stderr %q", shell, code, out[:min(len(out), 40)], errs)
		}
	}
	code, out, _, made := run(t, "__complete", "tree", "fo")
	if code != 0 || !strings.Contains(out, "fork\t") || made {
		t.Errorf("completion of 'tree fo': exit %d, %q, home made %v", code, out, made)
	}
}

// TestDaemonFile: the configuration file's keys, unknown keys refused, and
// a missing file that was not named is no error.
func TestDaemonFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "arbord.toml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := write("socket = \"/run/a.sock\"\nallow_uids = [1000, 1001]\nhttp = \"127.0.0.1:7878\"\npassthrough = false\nlog_level = \"debug\"\n" +
		"max_conns = 64\nmax_conns_per_uid = 8\nidle_timeout = \"5m\"\n")
	fc, err := readDaemonFile(p, true)
	if err != nil {
		t.Fatal(err)
	}
	s, err := fc.config("/h")
	if err != nil {
		t.Fatal(err)
	}
	if s.Home != "/h" || s.Socket != "/run/a.sock" || s.HTTPAddr != "127.0.0.1:7878" || len(s.AllowUIDs) != 2 ||
		s.Passthrough == nil || *s.Passthrough || s.logLevel.String() != "DEBUG" ||
		s.MaxConns != 64 || s.MaxConnsPerUID != 8 || s.IdleTimeout != 5*time.Minute {
		t.Errorf("config %+v (level %v)", s.Config, s.logLevel)
	}
	for body, want := range map[string]string{
		"htpp = \"x\"\n":            "unknown key htpp",
		"http = 7878\n":             "configuration file",
		"log_level = \"loud\"\n":    `log_level "loud"`,
		"allow_uids = [-1]\n":       "allow_uids: -1",
		"http = \n":                 "configuration file",
		"max_conns = -1\n":          "max_conns -1",
		"idle_timeout = \"soon\"\n": `idle_timeout "soon"`,
	} {
		fc, err := readDaemonFile(write(body), true)
		if err == nil {
			_, err = fc.config("/h")
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", body, err, want)
		}
	}
	if _, err := readDaemonFile(filepath.Join(dir, "none.toml"), false); err != nil {
		t.Errorf("a missing default file: %v", err)
	}
	if _, err := readDaemonFile(filepath.Join(dir, "none.toml"), true); err == nil {
		t.Error("a missing file named by --config: no error")
	}
}
