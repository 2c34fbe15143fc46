// Package webui is arbord's web view of its trees, served at /ui on the
// HTTP face from files embedded in the binary (plain HTML, CSS and a JS
// module: no build step). The page asks for the HTTP token once and keeps
// it in sessionStorage; it draws a tree from GET /v1/trees/{tree}, follows
// it over the SSE watch stream (read with fetch, since EventSource cannot
// send the bearer token), and acts on nodes through the /v1 routes after
// a confirmation. Only visible rows are drawn, so a tree of thousands of
// nodes stays responsive.
//
// The files hold no data: every datum comes from the token-guarded routes,
// which is why /ui alone (with /healthz) is served without the token.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the web view under /ui/.
func Handler() http.Handler {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
