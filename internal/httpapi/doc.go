// Package httpapi is the daemon's HTTP face: the tree verbs as REST
// resources under /v1, with forkd's conventions (bearer token, loopback by
// default, an audit log) and k7d's replies.
//
// # Resources
//
// Every verb of api's verb table that has an HTTP route is one resource
// (api.Verbs: its method and path, 201 where it creates, its body type), for
// example
//
//	POST   /v1/trees                                  tree_create (201), api.TreeCreateBody
//	GET    /v1/trees/{tree}                           tree_nodes
//	POST   /v1/trees/{tree}/nodes/{node}/fork         {"label"} tree_fork, {"labels"} tree_fork_batch (201)
//	DELETE /v1/trees/{tree}/nodes/{node}              tree_abort
//
// and the face adds GET /v1/events[?tree=ID] (tree_watch of one or every
// tree), GET /v1/openapi.json (all of it as OpenAPI 3, checked against the
// table by the tests), GET /metrics (Prometheus), GET /healthz (liveness,
// without the token), /mcp (the MCP server's streamable HTTP, Config.MCP)
// and GET /ui/ (the web view's files, without the token, Config.UI).
//
// A reply body is the api.Response of the verb, exactly as the JSON-lines
// face sends it. An error is {"status":"error","code","message"} with the
// HTTP status of its code in api's error table (api.Errors): bad_request
// 400, unauthorized 401, not_found 404, the conflicts with the tree's state
// 409 (budget among them: abort, prune or evict can change it, so 409 rather
// than 422), no_space 507, not_supported 501, unavailable 503, internal
// 500. Unknown routes (404) and methods (405, with Allow) use the same
// envelope.
//
// Request bodies are JSON objects decoded strictly (unknown fields, wrong
// types and trailing data are bad_request) and limited to
// Config.MaxBodyBytes (413 with code bad_request). Verbs without arguments
// accept an empty body or {}.
//
// # Watch as server-sent events
//
// The first event is "tree_watching" (the snapshot reply), then one
// "tree_event" per change, each with id = the event's seq and data = the
// same JSON line the socket face sends. A comment line every 15 s keeps
// proxies from timing the stream out.
//
// # Exec and files
//
// POST .../exec answers the collected form (api.ExecResult: a ring of the
// last api.MaxExecCollect bytes of each stream) or, asked by Accept or
// ?stream=, streams the socket's reply lines as NDJSON or server-sent
// events, each write flushed and bounded by a minute: a client that stops
// reading holds the command back, then ends it. A node's files are
// .../files/{path...}: GET streams the file as the body (octet-stream;
// X-Arbor-File-Mode, -Size, -Mtime), PUT streams the body into it
// (atomically; a JSON body type is refused, never written), ?stat=1,
// ?list=1 and ?mkdir=1 select the verb sharing the route (api.Verb.Flag).
// The path's "." and ".." segments, raw or escaped, reach the node, which
// resolves them inside itself as on the socket: ServeHTTP escapes the raw
// ones first (keepDots), or the mux would redirect to a cleaned path, and
// a ".." could climb out of the files route. A PUT with "Expect:
// 100-continue" gets its 100 Continue only once the write is accepted (the
// body is first read then), so a refusal is its reply.
//
// # Images
//
// POST /v1/images (api.ImageBuildBody) builds an image the same two ways
// (the Handler's BuildImage, ImageBuilder): collected, the image_built
// reply once the build ends; streamed, image_progress lines as it goes,
// then image_built. The request's end cancels the build. GET /v1/images is
// image_list, DELETE /v1/images/{image} image_rm. The token counts as the
// daemon's user, which may build and remove images (the daemon refuses
// other socket uids).
//
// # Security
//
// Every route but /healthz and GET /ui/ (static files, no data) needs
// "Authorization: Bearer <token>", compared in constant time (over SHA-256 digests, so the length does not
// leak either); New refuses a Config without a Token (the daemon generates
// one when none is given). The token is HTTP's only credential: the paths a
// request names are checked as the daemon's own user (access.Self). The audit log (internal/audit, shared
// with the socket face) gets one JSON line per request (time, face, remote,
// method, path, status, error code, duration, op, tree, node); never the
// token or the query string.
//
// # Lifecycle
//
// Serve runs an http.Server on a listener until ctx ends, then stops
// accepting, ends every watch stream, lets verbs in flight finish (up to
// ShutdownTimeout) and returns after all handlers have.
package httpapi
