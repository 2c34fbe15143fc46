// Package metrics is the daemon's Prometheus instrumentation: one Metrics
// value, shared by every API face, that counts requests, times operations and
// reports per-tree gauges.
//
// Vocabulary
//
//   - face: the door a request came in by ("line" for JSON-lines over the
//     Unix socket, "http" for REST, "mcp" for an MCP tool call).
//   - op: the wire op name (tree_fork, tree_commit, ...). Faces pass only
//     known ops or "unknown", so label cardinality stays bounded.
//   - code: "ok" for success, else the api error code (not_found, stale, ...).
//
// Series
//
//	arbor_requests_total{face,op,code}            counter
//	arbor_operation_duration_seconds{op}          histogram (face-measured)
//	arbor_line_connections                        gauge
//	arbor_line_connections_limited_total{reason}  counter, reason = max_conns |
//	                                              max_conns_per_uid | out_of_fds | idle
//	arbor_trees                                   gauge
//	arbor_tree_nodes{tree,state}                  gauge
//	arbor_tree_usage_bytes{tree,kind}             gauge, kind = ram | disk
//	arbor_tree_budget_bytes{tree,kind}            gauge, kind = ram | disk
//	arbor_tree_live_nodes{tree}                   gauge
//	arbor_tree_max_live_nodes{tree}               gauge
//
// # Lifecycle and locking
//
// The registry is private to the Metrics value (never the global one), so
// tests and several daemons in one process do not collide. The tree gauges
// are pulled from a Gauges callback at scrape time: nothing is cached, and
// the callback must be safe for concurrent use. A nil *Metrics is valid and
// records nothing, so a face can run without instrumentation.
package metrics
