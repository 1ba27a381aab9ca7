package daemon

import (
	"embed"
	"io/fs"
	"net/http"
)

// The dashboard: static files in the binary (no Node build), served to the HTTP listener.
// They hold no data; every piece of it comes from the API with the bearer token.
//
//go:embed web
var webFiles embed.FS

// webCSP allows the page nothing but its own files and the API.
const webCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// dashboard serves /, /favicon.ico and /ui/*.
func dashboard() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	files := http.StripPrefix("/ui/", http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", webCSP)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		switch r.URL.Path {
		case "/":
			http.ServeFileFS(w, r, sub, "index.html")
			return
		case "/favicon.ico":
			// Browsers ask for it whatever the page says; it holds no data, like the rest.
			http.ServeFileFS(w, r, sub, "favicon.svg")
			return
		}
		files.ServeHTTP(w, r)
	})
}

// isDashboard reports whether a request is for the dashboard's static files.
func isDashboard(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/" || r.URL.Path == "/favicon.ico" || len(r.URL.Path) > 4 && r.URL.Path[:4] == "/ui/")
}
