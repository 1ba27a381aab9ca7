package daemon

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A mount marked OpenOnLoopback needs no token while the daemon listens on loopback,
// and needs it (as a bearer or as x-luft-token) on any other address; other mounts
// always need it; every mount keeps the Host and Origin checks over HTTP, and the unix
// socket serves them all.
func TestMountsOpenVersusTokenRequired(t *testing.T) {
	door := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) })
	}
	tests := []struct {
		listen string
		path   string
		hdr    []string
		code   int
	}{
		{"127.0.0.1:7878", "/open/x", nil, 200},
		{"127.0.0.1:7878", "/open/x", []string{"Authorization", "Bearer sk-upstream"}, 200},
		{"127.0.0.1:7878", "/closed/x", nil, 401},
		{"127.0.0.1:7878", "/closed/x", []string{"Authorization", "Bearer secret"}, 200},
		{"127.0.0.1:7878", "/closed/x", []string{"x-luft-token", "secret"}, 200},
		{"127.0.0.1:7878", "/closed/x", []string{"x-luft-token", "wrong", "Authorization", "Bearer secret"}, 401},
		{"127.0.0.1:7878", "/open/x", []string{"Origin", "https://evil.example"}, 403},
		{"[::1]:7878", "/open/x", nil, 200},
		{"0.0.0.0:7878", "/open/x", nil, 401},
		{"0.0.0.0:7878", "/open/x", []string{"Authorization", "Bearer sk-upstream"}, 401},
		{"0.0.0.0:7878", "/open/x", []string{"x-luft-token", "secret", "Authorization", "Bearer sk-upstream"}, 200},
		{"0.0.0.0:7878", "/closed/x", []string{"Authorization", "Bearer secret"}, 200},
	}
	for _, tc := range tests {
		d, _ := newTestDaemon(t)
		d.opts.Listen = tc.listen
		d.mounts = []Mount{{Pattern: "/open/", Handler: door("open"), OpenOnLoopback: true}, {Pattern: "/closed/", Handler: door("closed")}}
		if code, body := call(t, d.handler(true), "GET", tc.path, "", tc.hdr...); code != tc.code {
			t.Errorf("listen %s, %s %v: HTTP %d, want %d: %s", tc.listen, tc.path, tc.hdr, code, tc.code, body)
		}
		// Over the unix socket (mode 0600) every mount answers without a token.
		if code, _ := call(t, d.handler(false), "GET", tc.path, ""); code != 200 {
			t.Errorf("socket %s: HTTP %d", tc.path, code)
		}
	}
	// A Host that is not loopback is refused on an open mount too (DNS rebinding).
	d, _ := newTestDaemon(t)
	d.opts.Listen = "127.0.0.1:7878"
	d.mounts = []Mount{{Pattern: "/open/", Handler: door("open"), OpenOnLoopback: true}}
	req := httptest.NewRequest("GET", "http://rebound.example:7878/open/x", nil)
	rec := httptest.NewRecorder()
	d.handler(true).ServeHTTP(rec, req)
	if rec.Code != 403 {
		t.Errorf("rebinding Host on an open mount: HTTP %d, want 403", rec.Code)
	}
}
