package daemon

import (
	"context"
	"net"
	"net/http"
)

// peerKey holds, in a unix-socket connection's context, why its peer is refused (nil:
// it is not).
type peerKey struct{}

// peerContext checks who is at the other end of a unix-socket connection (see
// checkPeer) and keeps the verdict for every request on it.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	if uc, ok := c.(*net.UnixConn); ok {
		return context.WithValue(ctx, peerKey{}, checkPeer(uc))
	}
	return ctx
}

// refusePeers answers every request of a refused peer with 403 and the reason.
func refusePeers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err, _ := r.Context().Value(peerKey{}).(error); err != nil {
			apiError(w, http.StatusForbidden, "%v", err)
			return
		}
		next.ServeHTTP(w, r)
	})
}
