// Package lineapi is the daemon's JSON-lines face: the tree verbs over a Unix
// socket, with k7d's envelope.
//
// # Protocol
//
// One JSON object per line each way, many per connection, answered in
// order. A request carries "op" (api.Op*), a reply "status". An error is
// always {"status":"error","code":"...","message":"..."}. Requests are
// decoded strictly: an unknown field, a wrong type, trailing data after the
// object, a missing or unknown op, or a line over Config.MaxLineBytes is a
// bad_request, and the connection goes on with the next line. Blank lines are
// ignored.
//
// tree_watch turns the connection into a stream: the snapshot reply
// ("tree_watching"), then one {"status":"tree_event","event":{...}} line per
// event, until the client closes the connection, the engine ends the stream,
// or the server shuts down. Lines the client sends after tree_watch are read
// and ignored (reading is how the server notices the client left).
//
// tree_exec and exec_logs stream too: "tree_exec_output" lines as the
// command writes (each flushed; a client that stops reading holds the
// command back), then one "tree_exec_exit" (or "exec_logs") line, after
// which the connection takes requests again; an exec_logs with follow,
// which may be silent for long, reads the client's input to notice it
// leave, and ends the connection with the stream. file_read is "file_data" lines
// of api.MaxInputChunk bytes, then one "file_read" line with the last
// chunk and the file's description: at most two chunks are held.
//
// A request with "input": true (file_write, tree_exec) is followed by the
// client's api.Input lines ({"data":BASE64}, {"rows","cols"}, {"eof":true}),
// each bounded like a request line. file_write streams them into the file
// and answers after the EOF line (a write refused early drains them; a
// malformed one ends the connection). tree_exec forwards them to the
// command's stdin and pty as they come, from a goroutine that owns the
// reader until the exec ends; the connection then closes, since a
// terminal's input may never reach EOF.
//
// # Access
//
// Listen creates the socket with mode 0600 (only the daemon's user and root
// can connect), or, given an allow-list, mode 0666 with every connection's
// peer uid checked with SO_PEERCRED; root and the daemon's own uid are always
// allowed. A refused peer gets one unauthorized error line and is closed. The
// mode is set before the socket appears at its path (it is bound in a private
// directory and hard-linked into place), so there is no window with a wider
// mode, and an existing socket is removed only if nothing answers on it.
// Every request's context carries its connection's peer uid (Peer), so the
// handler can restrict ops such as shutdown, and the peer's full
// credentials (uid, gid, groups from SO_PEERCRED and SO_PEERGROUPS, as
// access.FromContext), against which the paths a request names are
// checked. A connection whose credentials cannot be read is answered with
// one unauthorized line and closed.
//
// # Limits
//
// Serve admits at most Limits.MaxConns connections at once, and
// Limits.MaxConnsPerUID of one peer uid; the defaults (DefaultLimits) leave
// a reserve of RLIMIT_NOFILE to the FUSE servers and the stores. A
// connection past a cap gets one {"code":"limit"} error line and is closed
// at once, from the accept loop. A connection with no request in flight and
// no watch is closed after Limits.IdleTimeout, with a limit line saying so
// (the deadline runs while the server waits for a request line, and while
// it writes a reply). When accept fails for want of descriptors, the server
// frees a spare descriptor to accept and refuse one waiting connection and
// backs off (5 ms doubling to 1 s), so it neither spins nor leaves clients
// hanging. A connection holds a 4 KiB read buffer (longer lines are gathered
// by readLine); write buffers come from a pool, held only while a reply is
// written. What is gathered for lines still waiting for their newline counts
// against one budget for all connections (Config.MaxPendingLineBytes,
// default 64 MiB): a connection whose partial line would pass it gets a limit
// line and is closed, rather than waiting, since the bytes that fill the
// budget wait on their own clients and waiting would free none of them. A
// request that fits the read buffer (every ordinary one) never touches the
// budget, so a flood of partial lines cannot lock ordinary clients out. After a flood subsides (an eighth of a peak of 256 or more) one
// goroutine of Serve returns the freed memory to the OS.
//
// # Lifecycle and goroutines
//
// Server.Serve owns the listener, one goroutine per connection (plus one
// reader per watch stream) and the scavenger; it closes the listener and
// every connection when its ctx ends and returns only after all of them
// have exited. A request's
// context is the connection's, cancelled when the server stops; a panic in
// the Handler is recovered and answered as internal.
package lineapi
