package version

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
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
			name: "a checkout build is dev although Go names it with a pseudo-version",
			bi: &debug.BuildInfo{
				GoVersion: "go1.26.0",
				Main:      debug.Module{Path: "github.com/luft-run/luft", Version: "v0.0.1-0.20260102030405-abc123def456+dirty"},
				Settings: []debug.BuildSetting{
					{Key: "vcs.revision", Value: "abc123def456"},
					{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
					{Key: "vcs.modified", Value: "false"},
				},
			},
			want:       Info{Version: "dev", Commit: "abc123def456", Date: "2026-01-02T03:04:05Z", GoVersion: "go1.26.0"},
			wantString: "luft dev (commit abc123def456, built 2026-01-02T03:04:05Z, go1.26.0 ",
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

// TestCheckoutBuild builds luft from this checkout the way a contributor does (go build)
// and checks what docs/cli.md promises of such a build: version "dev", the checkout's
// commit, and a "modified" field in the JSON whether or not the tree had changes.
func TestCheckoutBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds luft; skipped with -short")
	}
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout, or git is missing (install git to run this test): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "luft")
	build := exec.Command(goBin(t), "build", "-buildvcs=auto", "-o", bin, "github.com/luft-run/luft/cmd/luft")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		t.Fatalf("luft version --json: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("luft version --json printed %q: %v", out, err)
	}
	if got["version"] != "dev" {
		t.Errorf("version = %v, want dev for a build from a checkout", got["version"])
	}
	// Go records nothing of a git worktree (its .git is a file), so the commit is checked
	// only where Go recorded one.
	recorded, err := exec.Command(goBin(t), "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m: %v", err)
	}
	vcs := strings.Contains(string(recorded), "vcs.revision=")
	if vcs && got["commit"] != strings.TrimSpace(string(head)) {
		t.Errorf("commit = %v, want the checkout's %s", got["commit"], head)
	}
	if _, ok := got["modified"].(bool); !ok {
		t.Errorf("JSON %s has no boolean modified field", out)
	}
	line, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(line), "luft dev (commit ") {
		t.Errorf("luft version = %q (%v), want it to start with luft dev (commit", line, err)
	}
}

// goBin is the go command that runs this test: the one on PATH, which is what built it.
func goBin(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is not on PATH (put Go's bin folder on PATH to run this test): %v", err)
	}
	return p
}
