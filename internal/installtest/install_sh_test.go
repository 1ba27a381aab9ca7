package installtest

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// server serves a release tree as GitHub does: download/vX.Y.Z/FILE, and latest/download/
// FILE redirecting to the newest release. Paths under download/v1.6.0/ answer 500.
type server struct {
	url  string
	mu   sync.Mutex
	reqs []string
}

const latest = "v1.1.0"

func serve(t *testing.T, root string) *server {
	t.Helper()
	s := &server{}
	files := http.FileServer(http.Dir(root))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.URL.Path)
		s.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/latest/download/"):
			http.Redirect(w, r, "/download/"+latest+"/"+strings.TrimPrefix(r.URL.Path, "/latest/download/"), http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/download/v1.6.0/"):
			http.Error(w, "upstream trouble", http.StatusInternalServerError)
		default:
			files.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *server) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// sandbox is one install.sh run's world: its own HOME, TMPDIR and PATH, where PATH holds
// the system's tools minus `go` (and whatever the test removes) plus the test's fakes.
type sandbox struct {
	t      *testing.T
	home   string
	tmp    string
	fakes  string // first on PATH
	tools  string
	env    []string
	goLog  string
	server *server
	shell  []string // what runs install.sh: /bin/sh unless a test says otherwise
}

func newSandbox(t *testing.T, srv *server, without ...string) *sandbox {
	t.Helper()
	d := t.TempDir()
	sb := &sandbox{t: t, home: filepath.Join(d, "home"), tmp: filepath.Join(d, "tmp"), fakes: filepath.Join(d, "fakes"),
		tools: filepath.Join(d, "tools"), goLog: filepath.Join(d, "go.log"), server: srv, shell: []string{"/bin/sh"}}
	for _, p := range []string{sb.home, sb.tmp, sb.fakes, sb.tools} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// install.sh downloads with curl, else wget, and checks with sha256sum, else shasum
	// (perl's): the first of each that the test leaves in place must be on the host.
	for _, alts := range [][][2]string{{{"curl", "curl"}, {"wget", "wget"}}, {{"sha256sum", "coreutils"}, {"shasum", "perl"}}} {
		for _, a := range alts {
			if !slices.Contains(without, a[0]) {
				testkit.NeedTool(t, a[0], "apt-get install "+a[1])
				break
			}
		}
	}
	linkTools(t, sb.tools, append([]string{"go", "gofmt"}, without...))
	sb.env = []string{
		"HOME=" + sb.home, "TMPDIR=" + sb.tmp, "SHELL=/bin/bash", "LANG=C",
		"PATH=" + sb.fakes + string(os.PathListSeparator) + sb.tools,
		"LUFT_INSTALL_BASE_URL=" + srv.url,
		"FAKE_GO_LOG=" + sb.goLog,
	}
	return sb
}

// linkTools fills dir with links to every program in the usual system directories except
// the named ones, so a test can take one away (go, curl, sha256sum) without losing the rest.
func linkTools(t *testing.T, dir string, without []string) {
	t.Helper()
	for _, sys := range []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
		entries, err := os.ReadDir(sys)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if slices.Contains(without, e.Name()) {
				continue
			}
			link := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier directory wins, as on PATH
			}
			if err := os.Symlink(filepath.Join(sys, e.Name()), link); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// fake writes an executable shell script into the sandbox's first PATH directory.
func (sb *sandbox) fake(name, script string) {
	sb.t.Helper()
	if err := os.WriteFile(filepath.Join(sb.fakes, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		sb.t.Fatal(err)
	}
}

// fakeGo puts a `go` on PATH that records each call as "go ARGS GOBIN=..." and, for
// install, writes a luft into $GOBIN as the real one would.
func (sb *sandbox) fakeGo() {
	sb.fake("go", `printf 'go %s GOBIN=%s\n' "$*" "${GOBIN-}" >> "$FAKE_GO_LOG"
case $1 in
version) echo 'go version go1.99.0 fake/arch' ;;
install) mkdir -p "$GOBIN" && printf '#!/bin/sh\necho luft built by the fake go\n' > "$GOBIN/luft" && chmod 755 "$GOBIN/luft" ;;
esac
`)
}

// fakeUname makes uname report another OS and machine.
func (sb *sandbox) fakeUname(s, m string) {
	sb.fake("uname", `case ${1-} in
-m) echo '`+m+`' ;;
*) echo '`+s+`' ;;
esac
`)
}

func (sb *sandbox) goCalls() []string {
	b, err := os.ReadFile(sb.goLog)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		sb.t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

type result struct {
	stdout, stderr string
	code           int
}

// install runs install.sh with the sandbox's shell (/bin/sh: dash on Debian, a strict POSIX
// shell) and checks that it left no temporary files behind, whatever the outcome.
func (sb *sandbox) install(args ...string) result {
	sb.t.Helper()
	script, err := filepath.Abs(filepath.Join(repoRoot, "install.sh"))
	if err != nil {
		sb.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(slices.Clone(sb.shell[1:]), script), args...)
	cmd := exec.CommandContext(ctx, sb.shell[0], argv...)
	cmd.Env = sb.env
	cmd.Dir = sb.home
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		sb.t.Fatalf("install.sh %v: %v\n%s", args, err, r.stderr)
	}
	if left, _ := os.ReadDir(sb.tmp); len(left) > 0 {
		sb.t.Errorf("install.sh %v left %d entries in TMPDIR (first %s)", args, len(left), left[0].Name())
	}
	return r
}

func mustSucceed(t *testing.T, r result, args ...string) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("install.sh %v exited %d:\n%s", args, r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("install.sh %v wrote to stdout (everything goes to stderr): %q", args, r.stdout)
	}
}

// luftVersion runs an installed luft's `version`.
func luftVersion(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	return string(out)
}

func hostOnly(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
		t.Skip("install.sh is for Linux and macOS")
	}
}

// A good install: latest by default, into ~/.luft/bin, checked, the stamped version shown,
// and a hint since the directory is not on PATH.
func TestInstallLatest(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	for _, tc := range []struct {
		name    string
		without []string
		shell   []string
	}{
		{name: "curl and sha256sum"},
		{name: "wget and shasum", without: []string{"curl", "sha256sum"}},
		{name: "bash in POSIX mode", shell: []string{"bash", "--posix"}}, // macOS's /bin/sh
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, rel.root)
			sb := newSandbox(t, srv, tc.without...)
			if tc.shell != nil {
				sb.shell = tc.shell
			}
			r := sb.install()
			mustSucceed(t, r)
			bin := filepath.Join(sb.home, ".luft", "bin", "luft")
			got := luftVersion(t, bin)
			want := "luft " + latest + " (commit " + rel.commit + ", built " + rel.date + ", go"
			if !strings.HasPrefix(got, want) {
				t.Errorf("installed luft version = %q, want prefix %q", got, want)
			}
			if !strings.Contains(r.stderr, "installed "+bin+": "+strings.TrimSpace(got)) {
				t.Errorf("install.sh did not report what it installed:\n%s", r.stderr)
			}
			hint := `echo 'export PATH="` + filepath.Dir(bin) + `:$PATH"' >> ~/.bashrc`
			if !strings.Contains(r.stderr, hint) {
				t.Errorf("no PATH hint %q in:\n%s", hint, r.stderr)
			}
			reqs := srv.requests()
			for _, p := range []string{"/latest/download/" + rel.archive, "/latest/download/checksums.txt", "/download/" + latest + "/" + rel.archive} {
				if !slices.Contains(reqs, p) {
					t.Errorf("requests %v lack %s", reqs, p)
				}
			}
			if fi, err := os.Stat(bin); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("installed binary: %v, mode %v; want 0755", err, fi.Mode())
			}
		})
	}
}

// --version picks that release, --dir is honoured (relative to the working directory), a
// second install replaces the first, and no PATH hint when the directory is on PATH.
func TestInstallVersionAndDir(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	srv := serve(t, rel.root)
	sb := newSandbox(t, srv)
	dir := filepath.Join(sb.home, "tools", "bin")
	sb.env = append(sb.env, "PATH="+dir+string(os.PathListSeparator)+sb.fakes+string(os.PathListSeparator)+sb.tools)

	r := sb.install("--version", "1.0.0", "--dir", "tools/bin")
	mustSucceed(t, r)
	if got := luftVersion(t, filepath.Join(dir, "luft")); !strings.HasPrefix(got, "luft v1.0.0 (commit "+rel.commit) {
		t.Errorf("--version 1.0.0 installed %q", got)
	}
	if !slices.Contains(srv.requests(), "/download/v1.0.0/"+rel.archive) {
		t.Errorf("--version 1.0.0 requested %v", srv.requests())
	}
	if strings.Contains(r.stderr, "not on your PATH") {
		t.Errorf("a PATH hint although %s is on PATH:\n%s", dir, r.stderr)
	}

	r = sb.install("--dir="+dir, "--version=v1.1.0")
	mustSucceed(t, r)
	if got := luftVersion(t, filepath.Join(dir, "luft")); !strings.HasPrefix(got, "luft v1.1.0 ") {
		t.Errorf("upgrade to v1.1.0 left %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("%s holds %d entries after two installs, want only luft", dir, len(entries))
	}
	if _, err := os.Stat(filepath.Join(sb.home, ".luft")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--dir given, yet ~/.luft was created (%v)", err)
	}

	spaced := filepath.Join(sb.home, "my tools", "$(touch pwned)", "bin")
	r = sb.install("--dir", spaced, "--version", "v1.0.0")
	mustSucceed(t, r)
	if got := luftVersion(t, filepath.Join(spaced, "luft")); !strings.HasPrefix(got, "luft v1.0.0 ") {
		t.Errorf("install into %q left %q", spaced, got)
	}
	if !strings.Contains(r.stderr, `echo 'export PATH="`+spaced+`:$PATH"'`) {
		t.Errorf("no PATH hint for %q in:\n%s", spaced, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(sb.home, "pwned")); err == nil {
		t.Error("a directory name was run as a command")
	}
}

// What must not be installed: a tampered archive, an archive checksums.txt does not list,
// an archive without checksums.txt, a server error (no fallback to go install for that).
func TestInstallRefuses(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	for _, tc := range []struct {
		version, want string
	}{
		{"v1.3.0", "SHA-256 mismatch for " + rel.archive},
		{"v1.4.0", "checksums.txt of release v1.4.0 has no entry for " + rel.archive + ": refusing to install an unchecked archive"},
		{"v1.5.0", "could not download checksums.txt of release v1.5.0: refusing to install an unchecked archive"},
		{"v1.6.0", "HTTP 500"},
		{"v9.9.9", "release v9.9.9 has no " + rel.archive},
	} {
		t.Run(tc.version, func(t *testing.T) {
			sb := newSandbox(t, serve(t, rel.root))
			if tc.version == "v1.6.0" {
				sb.fakeGo() // a server error is not "no archive": go install must not run
			}
			r := sb.install("--version", tc.version)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("install.sh --version %s: exit %d, want 1 and %q in:\n%s", tc.version, r.code, tc.want, r.stderr)
			}
			if _, err := os.Stat(filepath.Join(sb.home, ".luft", "bin", "luft")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("install.sh --version %s installed luft anyway (%v)", tc.version, err)
			}
			if calls := sb.goCalls(); len(calls) > 0 {
				t.Errorf("install.sh --version %s ran go: %v", tc.version, calls)
			}
		})
	}
}

// No archive for the platform: go install at the same version into the same directory, or
// a clear error when Go is missing.
func TestInstallFallsBackToGoInstall(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	for _, tc := range []struct {
		name    string
		args    []string
		uname   [2]string // fake uname -s and -m; empty for the host's
		without []string
		want    string // the go install call
	}{
		{name: "release lacks the archive", args: []string{"--version", "v1.2.0"},
			want: "go install github.com/luft-run/luft/cmd/luft@v1.2.0 GOBIN=%DIR%"},
		{name: "release lacks the archive, wget", args: []string{"--version", "v1.2.0"}, without: []string{"curl"},
			want: "go install github.com/luft-run/luft/cmd/luft@v1.2.0 GOBIN=%DIR%"},
		{name: "no release for the architecture", uname: [2]string{"Linux", "riscv64"},
			want: "go install github.com/luft-run/luft/cmd/luft@latest GOBIN=%DIR%"},
		{name: "no release for the OS", uname: [2]string{"FreeBSD", "amd64"}, args: []string{"--version", "v1.0.0"},
			want: "go install github.com/luft-run/luft/cmd/luft@v1.0.0 GOBIN=%DIR%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(t, rel.root)
			sb := newSandbox(t, srv, tc.without...)
			if tc.uname[0] != "" {
				sb.fakeUname(tc.uname[0], tc.uname[1])
			}
			dir := filepath.Join(sb.home, ".luft", "bin")

			// Without Go: a clear error naming the command to run.
			r := sb.install(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, "Go is not installed") || !strings.Contains(r.stderr, "go install github.com/luft-run/luft/cmd/luft@") {
				t.Errorf("without go: exit %d, want 1 and advice to install Go:\n%s", r.code, r.stderr)
			}

			sb.fakeGo()
			r = sb.install(tc.args...)
			mustSucceed(t, r, tc.args...)
			want := strings.ReplaceAll(tc.want, "%DIR%", dir)
			if calls := sb.goCalls(); !slices.Contains(calls, want) {
				t.Errorf("go calls %q, want %q", calls, want)
			}
			if got := luftVersion(t, filepath.Join(dir, "luft")); !strings.Contains(got, "built by the fake go") {
				t.Errorf("installed luft says %q, want the fake go's build", got)
			}
			if tc.uname[0] != "" && len(srv.requests()) > 0 {
				t.Errorf("no archive can fit %s/%s, yet it downloaded %v", tc.uname[0], tc.uname[1], srv.requests())
			}
		})
	}
}

// The OS and machine names map to the archives' names: macOS on Apple silicon gets the
// darwin arm64 archive, aarch64 Linux the linux arm64 one.
func TestInstallPicksPlatformArchive(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	for _, tc := range []struct {
		s, m, archive, says string
		rosetta             bool // sysctl.proc_translated says 1: an x86_64 shell on Apple silicon
	}{
		{s: "Darwin", m: "arm64", archive: "luft_darwin_arm64.tar.gz", says: "luft stand-in for darwin/arm64 v1.1.0"},
		{s: "Darwin", m: "x86_64", archive: "luft_darwin_amd64.tar.gz", says: "luft stand-in for darwin/amd64 v1.1.0"},
		{s: "Darwin", m: "x86_64", rosetta: true, archive: "luft_darwin_arm64.tar.gz", says: "luft stand-in for darwin/arm64 v1.1.0"},
		{s: "Linux", m: "aarch64", archive: "luft_linux_arm64.tar.gz", says: "luft stand-in for linux/arm64 v1.1.0"},
	} {
		name := tc.s + "-" + tc.m
		if tc.rosetta {
			name += "-rosetta"
		}
		t.Run(name, func(t *testing.T) {
			if tc.archive == rel.archive {
				t.Skip("the host's own archive holds the real binary")
			}
			srv := serve(t, rel.root)
			sb := newSandbox(t, srv)
			sb.fakeUname(tc.s, tc.m)
			if tc.rosetta {
				sb.fake("sysctl", `[ "$*" = "-n sysctl.proc_translated" ] && echo 1`+"\n")
			} else {
				sb.fake("sysctl", "exit 1\n") // as on Linux, where the key does not exist
			}
			r := sb.install()
			mustSucceed(t, r)
			if !slices.Contains(srv.requests(), "/latest/download/"+tc.archive) {
				t.Errorf("uname %s %s: requests %v, want %s", tc.s, tc.m, srv.requests(), tc.archive)
			}
			if got := luftVersion(t, filepath.Join(sb.home, ".luft", "bin", "luft")); strings.TrimSpace(got) != tc.says {
				t.Errorf("installed %q, want the %s stand-in", got, tc.archive)
			}
		})
	}
}

// Bad arguments are refused before anything is downloaded.
func TestInstallBadArguments(t *testing.T) {
	hostOnly(t)
	rel := getRelease(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--version", "v1.0.0; rm -rf /"}, "is not a release tag like v1.2.3"},
		{[]string{"--version", "../../etc/passwd"}, "is not a release tag like v1.2.3"},
		{[]string{"--version=v1.0"}, "is not a release tag like v1.2.3"},
		{[]string{"--version"}, "--version needs a value"},
		{[]string{"--version", "--dir", "x"}, "--version needs a value"},
		{[]string{"--dir"}, "--dir needs a value"},
		{[]string{"--dir="}, "--dir is empty"},
		{[]string{"--force"}, "unknown argument '--force'"},
		{[]string{"uname=MINGW64_NT-10.0-19045"}, "this is Windows: install with PowerShell instead: irm https://raw.githubusercontent.com/luft-run/luft/main/install.ps1 | iex"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			srv := serve(t, rel.root)
			sb := newSandbox(t, srv)
			if u, ok := strings.CutPrefix(tc.args[0], "uname="); ok {
				sb.fakeUname(u, "x86_64")
				sb.fakeGo() // Git Bash with Go still gets pointed at install.ps1
				tc.args = nil
			}
			r := sb.install(tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, want 1 and %q in:\n%s", r.code, tc.want, r.stderr)
			}
			if reqs := srv.requests(); len(reqs) > 0 {
				t.Errorf("downloaded %v before refusing", reqs)
			}
			if calls := sb.goCalls(); len(calls) > 0 {
				t.Errorf("ran go before refusing: %v", calls)
			}
		})
	}
	sb := newSandbox(t, serve(t, rel.root))
	if r := sb.install("--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage: install.sh") {
		t.Errorf("--help: exit %d, stdout %q", r.code, r.stdout)
	}
}

// TestShellcheck keeps install.sh free of shellcheck findings as a POSIX sh script.
func TestShellcheck(t *testing.T) {
	path := testkit.NeedTool(t, "shellcheck", "apt-get install shellcheck")
	out, err := exec.Command(path, "--shell=sh", "--severity=style", filepath.Join(repoRoot, "install.sh")).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck install.sh: %v\n%s", err, out)
	}
}
