// Package client is the Go client of arbord: the tree verbs over the
// daemon's Unix socket (JSON-lines), and optionally over its HTTP face.
//
// Every call takes a ctx; its deadline and cancellation bound the round
// trip. Errors the daemon reports come back as *api.Error, which unwraps to
// the api sentinel of its code, so errors.Is(err, api.ErrStale) works across
// the socket. Transport failures are plain errors that wrap no sentinel.
//
// A Client is safe for concurrent use. It keeps a small pool of idle
// connections: each call takes one (dialing if none is idle), does one
// request and reply on it, and puts it back. A call whose ctx ends mid-flight
// closes its connection, since the reply may still be on its way. Watch uses
// a connection of its own for the life of the stream.
package client
