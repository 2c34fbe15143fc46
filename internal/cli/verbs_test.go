package cli

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/spf13/cobra"
)

// TestEveryVerbHasACommand: the commands' recorded verbs are exactly api's
// verb table: every verb has a command, and no command sends an op the
// table does not know.
func TestEveryVerbHasACommand(t *testing.T) {
	e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: io.Discard, getenv: func(string) string { return "" }}
	root := e.rootCmd()
	got := map[string][]string{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if ops := c.Annotations[opsKey]; ops != "" {
			for _, op := range strings.Split(ops, ",") {
				got[op] = append(got[op], c.CommandPath())
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	var table []string
	for _, v := range api.Verbs() {
		table = append(table, v.Op)
		if len(got[v.Op]) == 0 {
			t.Errorf("verb %s has no arbor command", v.Op)
		}
	}
	for op, cmds := range got {
		if !slices.Contains(table, op) {
			t.Errorf("%v send %q, which is not in api's verb table", cmds, op)
		}
	}
}
