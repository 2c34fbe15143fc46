package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// Resource URIs.
const (
	TreesURI      = "arbor://trees"
	nodesTemplate = "arbor://trees/{tree_id}/nodes"
)

// NodesURI is the URI of a tree's nodes resource.
func NodesURI(treeID string) string { return TreesURI + "/" + treeID + "/nodes" }

// treeOfURI returns the tree a nodes URI names.
func treeOfURI(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, TreesURI+"/")
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, "/nodes")
	return id, ok && id != "" && !strings.Contains(id, "/")
}

func (s *Server) addResources() {
	s.mcp.AddResource(&mcp.Resource{URI: TreesURI, Name: "trees", MIMEType: "application/json",
		Description: "Every tree the daemon holds, with its root, usage and budget."},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpTreeList})
			if err != nil {
				return nil, err
			}
			return jsonResource(req.Params.URI, TreesOut{Trees: nonNil(r.Trees)})
		})
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: nodesTemplate, Name: "tree nodes", MIMEType: "application/json",
		Description: "A tree's nodes (as the nodes tool returns them) with its usage and budget. Subscribe to hear when they change: every fork, commit, abort, prune, protect, suspend, resume and eviction."},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id, ok := treeOfURI(req.Params.URI)
			if !ok {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			out, err := s.nodes(ctx, id)
			if err != nil {
				if api.Code(err) == api.CodeNotFound {
					return nil, mcp.ResourceNotFoundError(req.Params.URI)
				}
				return nil, asToolError(err)
			}
			return jsonResource(req.Params.URI, out)
		})
}

func jsonResource(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", uri, err)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

// watch is one tree's event stream, shared by the sessions subscribed to
// its nodes resource.
type watch struct {
	uri    string
	cancel context.CancelFunc
	subs   map[*mcp.ServerSession]bool // guarded by Server.mu
}

// subscribe opens the tree's watch if no session holds it yet. A tree
// that does not exist fails the subscription.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	id, ok := treeOfURI(uri)
	if !ok {
		return mcp.ResourceNotFoundError(uri)
	}
	if s.join(uri, req.Session) {
		return nil
	}
	// Opened outside the lock (over stdio it is a round trip to the
	// daemon); the watch lives on the server's context, not the request's.
	wctx, cancel := context.WithCancel(s.life)
	_, events, err := s.watchTree(wctx, id)
	if err != nil {
		cancel()
		if api.Code(err) == api.CodeNotFound {
			return mcp.ResourceNotFoundError(uri)
		}
		return asToolError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[uri]; w != nil || s.life.Err() != nil { // another subscriber was quicker, or Close ran
		cancel()
		if w == nil {
			return fmt.Errorf("mcpserver: closed")
		}
		w.subs[req.Session] = true
		return nil
	}
	w := &watch{uri: uri, cancel: cancel, subs: map[*mcp.ServerSession]bool{req.Session: true}}
	s.watches[uri] = w
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.follow(wctx, w, events)
	}()
	return nil
}

// join adds ss to the watch of uri, if one is open.
func (s *Server) join(uri string, ss *mcp.ServerSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[uri]; w != nil {
		w.subs[ss] = true
		return true
	}
	return false
}

func (s *Server) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[req.Params.URI]; w != nil {
		delete(w.subs, req.Session)
		if len(w.subs) == 0 {
			s.endWatch(w)
		}
	}
	return nil
}

// endWatch stops w; s.mu is held.
func (s *Server) endWatch(w *watch) {
	w.cancel()
	if s.watches[w.uri] == w {
		delete(s.watches, w.uri)
	}
}

func (s *Server) watchTree(ctx context.Context, id string) (snap api.Response, ch <-chan api.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("mcpserver: watch panic", "tree", id, "panic", p)
			err = api.Errorf(api.ErrInternal, "tree_watch: the daemon failed serving this request")
		}
	}()
	return s.cfg.Handler.Watch(ctx, id)
}

// follow turns each burst of the tree's events into one update
// notification, until the watch ends, the stream ends (the tree was
// dropped, or the watcher fell behind), or no subscriber is left.
func (s *Server) follow(ctx context.Context, w *watch, events <-chan api.Event) {
	defer func() {
		s.mu.Lock()
		s.endWatch(w)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-events:
			if !ok {
				return
			}
		}
		for drained := false; !drained; { // a fork_batch of 50 is one update
			select {
			case _, ok := <-events:
				if !ok {
					drained = true
					events = nil
				}
			default:
				drained = true
			}
		}
		if !s.subscribed(w) {
			return
		}
		if err := s.mcp.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: w.uri}); err != nil {
			s.log.Warn("mcpserver: resource update", "uri", w.uri, "err", err)
		}
		if events == nil {
			return
		}
	}
}

// subscribed drops the sessions that have gone and reports whether any is left.
func (s *Server) subscribed(w *watch) bool {
	live := map[*mcp.ServerSession]bool{}
	for ss := range s.mcp.Sessions() {
		live[ss] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ss := range w.subs {
		if !live[ss] {
			delete(w.subs, ss)
		}
	}
	return len(w.subs) > 0
}
