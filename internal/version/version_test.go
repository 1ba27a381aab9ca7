package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Path: "github.com/luft-run/luft", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	installed := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}}
	tests := []struct {
		name       string
		v, c, d    string
		bi         *debug.BuildInfo
		want       Info
		wantString string
	}{
		{
			name: "stamped release wins over build info",
			v:    "1.2.3", c: "deadbeef", d: "2026-02-03T04:05:06Z", bi: vcs,
			want:       Info{Version: "v1.2.3", Commit: "deadbeef", Date: "2026-02-03T04:05:06Z", GoVersion: "go1.26.0"},
			wantString: "luft v1.2.3 (commit deadbeef, built 2026-02-03T04:05:06Z, go1.26.0 ",
		},
		{
			name: "a v prefix is kept",
			v:    "v2.0.0-rc.1", c: "x", d: "y", bi: nil,
			want: Info{Version: "v2.0.0-rc.1", Commit: "x", Date: "y"},
		},
		{
			name:       "development build reads vcs settings",
			bi:         vcs,
			want:       Info{Version: "dev", Commit: "abc123", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26.0", Modified: true},
			wantString: "luft dev (commit abc123-dirty, built 2026-01-02T03:04:05Z, go1.26.0 ",
		},
		{
			name: "goreleaser without git state stamps none",
			v:    "0.0.1-next", c: "none", d: "2026-01-01T00:00:00Z", bi: vcs,
			want: Info{Version: "v0.0.1-next", Commit: "abc123", Date: "2026-01-01T00:00:00Z", GoVersion: "go1.26.0", Modified: true},
		},
		{
			name: "go install at a version",
			bi:   installed,
			want: Info{Version: "v1.4.0", Commit: "unknown", Date: "unknown", GoVersion: "go1.26.1"},
		},
		{
			name: "no build info at all",
			want: Info{Version: "dev", Commit: "unknown", Date: "unknown"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := resolve(tt.v, tt.c, tt.d, tt.bi)
			if tt.want.GoVersion == "" {
				tt.want.GoVersion = got.GoVersion // the running toolchain's
			}
			tt.want.Platform = got.Platform
			if got != tt.want {
				t.Errorf("resolve = %+v\nwant      %+v", got, tt.want)
			}
			if tt.wantString != "" && !strings.HasPrefix(got.String(), tt.wantString) {
				t.Errorf("String() = %q, want prefix %q", got.String(), tt.wantString)
			}
		})
	}
}

func TestGetIsNeverEmpty(t *testing.T) {
	in := Get()
	if in.Version == "" || in.Commit == "" || in.Date == "" || in.GoVersion == "" || !strings.Contains(in.Platform, "/") {
		t.Errorf("Get() = %+v, want every field filled", in)
	}
}
