package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/arbor-dev/arbor/client"
	"github.com/spf13/cobra"
)

// buildInfo is what the binary knows of its own build: the module version
// (a tag, a pseudo-version, or "(devel)"), the VCS commit and its time, and
// whether the tree had uncommitted changes.
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit,omitempty"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := bi.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionString is the one-line version (arbor --version).
func versionString() string {
	b := readBuildInfo()
	s := "arbor " + b.Version
	if b.Commit == "" {
		s += " (commit unknown: built with -buildvcs=false or outside a git checkout)"
	} else {
		s += " (commit " + b.Commit
		if b.Time != "" {
			s += ", " + b.Time
		}
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + b.Go + " " + b.Platform
}

func (e *env) versionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "The version of arbor, and of the daemon if one runs",
		Long: `Prints arbor's module version and the commit it was built from (from the
build's own record), and the version of the daemon of the home if one answers
(it does not start one).`,
		Example: "  arbor version\n  arbor version -o json\n  arbor --version",
		Args:    exactArgs(0, 0),
	}
	out := addOutput(cmd)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		daemonV := ""
		sock := e.socketOrDefault()
		cl := client.New(sock)
		ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
		if v, err := cl.Ping(ctx); err == nil {
			daemonV = v
		}
		cancel()
		cl.Close()
		if out.json {
			return json.NewEncoder(e.stdout).Encode(struct {
				buildInfo
				Daemon string `json:"daemon,omitempty"`
			}{readBuildInfo(), daemonV})
		}
		fmt.Fprintln(e.stdout, versionString())
		if daemonV != "" {
			fmt.Fprintf(e.stdout, "daemon %s on %s\n", daemonV, sock)
		} else {
			fmt.Fprintf(e.stdout, "no daemon answers on %s\n", sock)
		}
		return nil
	}
	return cmd
}
