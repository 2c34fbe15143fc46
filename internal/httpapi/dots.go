package httpapi

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/arbor-dev/arbor/api"
)

// restHeads are the segments before {path...} of every route that ends
// in one (the files route): "", "v1", "trees", "{tree}", ...
var restHeads = func() [][]string {
	seen := map[string]bool{}
	var out [][]string
	for _, v := range api.Verbs() {
		head, ok := strings.CutSuffix(v.Path, "/{path...}")
		if !ok || seen[head] {
			continue
		}
		seen[head] = true
		out = append(out, strings.Split(head, "/"))
	}
	return out
}()

// keepDots returns r with the {path...} of a files route kept whole: its
// "." and ".." segments escaped (%2E, %2E%2E) and its empty ones dropped.
// The mux would otherwise clean them with a redirect, and a ".." could
// climb out of the files route into another one; escaped, they reach the
// node, which resolves them inside itself as the socket face does. Any
// other request is r itself.
func keepDots(r *http.Request) *http.Request {
	ep := r.URL.EscapedPath()
	if !strings.Contains(ep, "/.") && !strings.Contains(ep, "//") {
		return r
	}
	for _, head := range restHeads {
		segs := strings.SplitN(ep, "/", len(head)+1)
		if len(segs) <= len(head) || !matchHead(head, segs[:len(head)]) {
			continue
		}
		var rest []string
		for _, s := range strings.Split(segs[len(head)], "/") {
			if s != "" {
				rest = append(rest, api.EscapeSegment(s, func(s string) string { return s }))
			}
		}
		raw := strings.Join(segs[:len(head)], "/") + "/" + strings.Join(rest, "/")
		p, err := url.PathUnescape(raw)
		if err != nil {
			return r // the mux answers it as it is
		}
		r2 := new(http.Request)
		*r2 = *r
		u := *r.URL
		u.Path, u.RawPath = p, raw
		r2.URL = &u
		return r2
	}
	return r
}

// matchHead reports whether escaped segments segs are a route's head: its
// literals as they are, a wildcard ({tree}, {node}) any one name that the
// mux would not clean.
func matchHead(head, segs []string) bool {
	for i, h := range head {
		s := segs[i]
		if strings.HasPrefix(h, "{") {
			if s == "" || s == "." || s == ".." {
				return false
			}
			continue
		}
		if s != h {
			return false
		}
	}
	return true
}
