// Package mcpserver is Arbor's Model Context Protocol face: the tree verbs
// as MCP tools, and each tree's nodes as an MCP resource that changes.
//
// It is one more face over the same Handler the socket and HTTP faces
// call (Do with an api.Request, Watch for the event stream), built on the
// official Go SDK (github.com/modelcontextprotocol/go-sdk). The daemon
// serves it over streamable HTTP at /mcp on its HTTP face, behind the
// bearer token and audit log, with its own router as the Handler; `arbor
// mcp` serves it on stdio with the Go client of the daemon's socket as
// the Handler (the daemon owns the stores: a second process cannot open
// them).
//
// Vocabulary: a tool is one verb (create_tree, fork, commit, ...); its
// input and output are JSON schemas derived from this package's types, and
// their descriptions are written for an agent that has not read our docs.
// A verb's error is a tool error (isError, never a JSON-RPC failure) whose
// text starts with the wire code ("stale: ...") and whose _meta carries it
// under MetaCode, so an agent can branch on it.
//
// Resources: arbor://trees lists the trees; arbor://trees/{tree_id}/nodes
// is a tree's nodes with its usage and budget, as tree_nodes replies.
// Subscribing to a tree's nodes opens one watch on that tree, shared by
// every session subscribed to it; each burst of events becomes one
// notifications/resources/updated. The watch lives on the Server's own
// context (never a request's) and ends when the last subscriber leaves,
// or when Close is called.
//
// exec, read_file, write_file and list_files are the engine's tree_exec
// and files verbs through the Handler (exec and read_file stream: the
// Handler's Exec and ReadFile, which the daemon's router and Socket have).
// exec on a dir tree answers the tool error not_supported (the dir backend
// runs no processes); the files tools serve every backend.
//
// list_images and build_image are the image verbs: build_image runs the
// whole build in the tool call (minutes for a first build, at once when
// cached), each progress line a notifications/progress when the call
// carries a progress token, cancelled with the call; it is the daemon's
// (root and its uid; the HTTP token counts as the daemon), like image_rm,
// which has no tool.
//
// Sharp edges: a session that disconnects without
// unsubscribing (the legacy protocol has no signal for it) keeps its tree's
// watch open until that tree's next event, when the watch finds no live
// subscriber and ends.
package mcpserver
