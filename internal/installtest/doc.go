// Package installtest tests luft's release path end to end: install.sh, install.ps1 and
// .goreleaser.yaml, which live at the repository root and have no Go code of their own.
//
// The tests build luft for the host with the ldflags that .goreleaser.yaml names, pack it
// into release archives laid out as a GitHub release is (plus small stand-in archives for
// the other platforms and a checksums.txt), serve them from a loopback HTTP server, and
// run install.sh against it with LUFT_INSTALL_BASE_URL. A fake `go` on PATH records the
// go install fallback, so no test needs the network.
//
// install.ps1 cannot run here (there is no PowerShell on Linux CI); it and luft's
// PowerShell completion script are parsed with the tree-sitter PowerShell grammar from
// ./node (npm ci --ignore-scripts there), and the commands they call are checked against
// the cmdlets Windows PowerShell 5.1 has.
package installtest
