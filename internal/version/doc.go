// Package version says which build of luft is running: the release version, the commit
// and the build date that the release build stamps with -ldflags -X, and the Go toolchain
// that built it.
//
// A release build (.goreleaser.yaml) sets the three variables:
//
//	-X github.com/luft-run/luft/internal/version.Version=v1.2.3
//	-X github.com/luft-run/luft/internal/version.Commit=<sha>
//	-X github.com/luft-run/luft/internal/version.Date=<RFC 3339>
//
// A build that is not stamped (go build, go install …@v1.2.3) reads what the Go toolchain
// recorded instead: the module version and the vcs.revision, vcs.time and vcs.modified
// settings of runtime/debug's build info.
package version
