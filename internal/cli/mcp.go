package cli

import (
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/mcpserver"
)

func (e *env) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve Arbor's tools to an agent over MCP on stdin and stdout",
		Long: `Serves the Model Context Protocol on stdin and stdout, for an agent (an MCP
client) that launches its tools: the tree verbs as tools (create_tree, fork,
commit, abort, rollback, protect, prune, suspend, resume, nodes, ...) and each
tree's nodes as a resource (arbor://trees/TREE/nodes) the agent may subscribe to.

It talks to the daemon over its socket, starting one if none answers, so the
agent's requests are checked as the user who runs arbor mcp. Nothing but the
protocol is written to stdout. arbord serves the same over streamable HTTP at
/mcp on its HTTP face (behind its token).

An MCP client's configuration (Claude Desktop, Cursor, ...):
  {"mcpServers": {"arbor": {"command": "arbor", "args": ["mcp"]}}}`,
		Example: "  arbor mcp\n  arbor --home /srv/arbor mcp",
		Args:    exactArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(cl *client.Client) error {
				srv, err := mcpserver.New(mcpserver.Config{Handler: mcpserver.Socket{Client: cl}, Version: readBuildInfo().Version})
				if err != nil {
					return err
				}
				defer srv.Close()
				return srv.Serve(e.ctx, &mcp.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopWriteCloser{e.stdout}})
			})
		},
	}
}

// nopWriteCloser leaves stdout open when the session ends: it is the
// process's, not the session's.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
