package door

import "net/http"

// Mount is a door's handler served by a host under a pattern of net/http's ServeMux
// ("/mcp", "/v1/"). In the daemon it passes the same Host and Origin checks as the API
// over HTTP; it needs the bearer token too unless OpenOnLoopback is set and the daemon
// listens on a loopback address (a proxy whose clients send their own upstream
// Authorization).
type Mount struct {
	Pattern        string
	Handler        http.Handler
	OpenOnLoopback bool
}
