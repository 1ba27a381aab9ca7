package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Set by -ldflags -X at release time; empty in development and `go install` builds. The
// release configuration names these three, and a test checks that it does.
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// Info is one build's identity. Fields that nothing recorded are "dev" (Version) or
// "unknown".
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go"`
	Platform  string `json:"platform"` // GOOS/GOARCH
	Modified  bool   `json:"modified"` // the checkout had changes (never for a stamped build)
}

// Get returns the running binary's Info: the stamped values first, else the build info.
func Get() Info {
	info, _ := debug.ReadBuildInfo()
	return resolve(Version, Commit, Date, info)
}

// resolve fills in Info from the stamped values and the build info (nil when the binary
// has none).
func resolve(v, c, d string, bi *debug.BuildInfo) Info {
	if c == "none" {
		c = "" // goreleaser's .FullCommit when it could not read git (a snapshot without a remote)
	}
	in := Info{
		Version: v, Commit: c, Date: d,
		GoVersion: runtime.Version(),
		Platform:  runtime.GOOS + "/" + runtime.GOARCH,
	}
	if bi != nil {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		checkout := false
		stamped := c != ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				checkout = true
				if in.Commit == "" {
					in.Commit = s.Value
				}
			case "vcs.time":
				if in.Date == "" {
					in.Date = s.Value
				}
			case "vcs.modified":
				// Only the build info's own commit can be dirty; a stamped one is what the
				// release built.
				in.Modified = !stamped && s.Value == "true"
			}
		}
		// Go 1.24 and later name a build from a checkout with a pseudo-version made of the
		// commit ("v0.0.1-0.20260102030405-0123abc+dirty"), which looks like a release and
		// says nothing the commit and date do not. A checkout build is "dev"; only a
		// module download (go install …@v1.2.3, no VCS settings) has a version of its own.
		if in.Version == "" && !checkout && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
	}
	in.Version = normalize(in.Version)
	if in.Commit == "" {
		in.Commit = "unknown"
	}
	if in.Date == "" {
		in.Date = "unknown"
	}
	return in
}

// normalize gives a version its "v" prefix (goreleaser's {{.Version}} has none; Go module
// versions have one) and names an unstamped, unversioned build "dev".
func normalize(v string) string {
	v = strings.TrimSpace(v)
	switch {
	case v == "" || v == "(devel)":
		return "dev"
	case v[0] >= '0' && v[0] <= '9':
		return "v" + v
	}
	return v
}

// String is the one line `luft version` prints:
//
//	luft v1.2.3 (commit 0123abc, built 2026-01-02T03:04:05Z, go1.26.0 linux/amd64)
func (in Info) String() string {
	c := in.Commit
	if in.Modified {
		c += "-dirty"
	}
	return fmt.Sprintf("luft %s (commit %s, built %s, %s %s)", in.Version, c, in.Date, in.GoVersion, in.Platform)
}
