package gateway

import (
	"net/http"
)

// pageHandler serves the web page from cfg.Page, or a short text page
// saying it is not built.
func (g *Gateway) pageHandler() http.Handler {
	var files http.Handler
	if g.cfg.Page != nil {
		files = http.FileServerFS(g.cfg.Page)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		if files == nil {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte("Rodon gateway\n\nThe web page is not built into this gateway. Build it (cd web && npm run build),\n" +
				"then rebuild the gateway. The API is served under /v1/ (docs/GATEWAY.md).\n"))
			return
		}
		files.ServeHTTP(w, r)
	})
}
