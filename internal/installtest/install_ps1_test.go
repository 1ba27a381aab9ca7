package installtest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
)

// ps1Parse is what node/parse-ps1.mjs reports for one file.
type ps1Parse struct {
	File      string   `json:"file"`
	Errors    []string `json:"errors"`
	Commands  []string `json:"commands"`
	Functions []string `json:"functions"`
	Params    []string `json:"params"`
	PS7       []string `json:"ps7"`
}

// ps1Parser is node with the tree-sitter PowerShell grammar in ./node; without them the
// test is skipped (or fails under LUFT_TEST_REQUIRE_TOOLS), naming the install step. A test
// calls it before any costly setup.
func ps1Parser(t *testing.T) string {
	t.Helper()
	node := testkit.Node(t)
	testkit.NeedTool(t, filepath.Join("node", "node_modules", "tree-sitter-powershell", "tree-sitter-powershell.wasm"),
		"run `npm ci --ignore-scripts` in internal/installtest/node")
	return node
}

// parsePS1 parses PowerShell files with the tree-sitter grammar in ./node (see ps1Parser).
func parsePS1(t *testing.T, files ...string) []ps1Parse {
	t.Helper()
	node := ps1Parser(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Liftoff only: optimising the 1 MB grammar takes node about 6 s of CPU, parsing a few
	// hundred lines without it some milliseconds.
	args := []string{"--liftoff-only", "parse-ps1.mjs"}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, abs)
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = "node"
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("parse-ps1.mjs: %v\n%s", err, stderr)
	}
	var res []ps1Parse
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var p ps1Parse
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("parse-ps1.mjs printed %q: %v", line, err)
		}
		res = append(res, p)
	}
	if len(res) != len(files) {
		t.Fatalf("parse-ps1.mjs reported %d files, want %d", len(res), len(files))
	}
	return res
}

// ps51 are the cmdlets install.ps1 may call: all ship with Windows PowerShell 5.1 (and 7).
var ps51 = []string{
	"Copy-Item", "Expand-Archive", "ForEach-Object", "Get-ChildItem", "Get-Command", "Get-Content",
	"Get-FileHash", "Invoke-WebRequest", "Join-Path", "Move-Item", "New-Item", "Out-Null", "Out-String",
	"Remove-Item", "Select-Object", "Set-StrictMode", "Test-Path", "Write-Host",
}

// TestInstallPS1Parses parses install.ps1 with a real PowerShell grammar (there is no pwsh
// here to run it): no syntax errors, no syntax that Windows PowerShell 5.1 lacks, the
// -Version and -Dir parameters, and only cmdlets 5.1 has, functions it defines, or the
// tar and chmod it runs off Windows.
func TestInstallPS1Parses(t *testing.T) {
	p := parsePS1(t, filepath.Join(repoRoot, "install.ps1"))[0]
	if len(p.Errors) > 0 {
		t.Errorf("install.ps1 does not parse:\n%s", strings.Join(p.Errors, "\n"))
	}
	if len(p.PS7) > 0 {
		t.Errorf("install.ps1 uses && or ||, which Windows PowerShell 5.1 lacks: %v", p.PS7)
	}
	if !slices.Equal(p.Params, []string{"$Version", "$Dir"}) {
		t.Errorf("install.ps1 parameters = %v, want $Version and $Dir", p.Params)
	}
	for _, c := range p.Commands {
		if !slices.Contains(ps51, c) && !slices.Contains(p.Functions, c) && c != "tar" && c != "chmod" {
			t.Errorf("install.ps1 calls %q: neither a Windows PowerShell 5.1 cmdlet nor a function it defines", c)
		}
	}
	for _, want := range []string{"Get-FileHash", "Invoke-WebRequest", "Expand-Archive"} {
		if !slices.Contains(p.Commands, want) {
			t.Errorf("install.ps1 does not call %s", want)
		}
	}
}

// TestPS1ParserCatchesMistakes proves the parse check can fail: a missing brace, an
// unterminated string and PowerShell 7-only syntax are each reported.
func TestPS1ParserCatchesMistakes(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "install.ps1"))
	if err != nil {
		t.Fatal(err)
	}
	good := string(src)
	last := strings.LastIndex(good, "}")
	broken := map[string]string{
		"missing-brace.ps1":     good[:last] + good[last+1:],
		"open-string.ps1":       strings.Replace(good, `Say "downloading $Url/$Archive"`, `Say "downloading $Url/$Archive`, 1),
		"ps7-chain.ps1":         good + "\nGet-Item x && Get-Item y\n",
		"ps7-ternary.ps1":       good + "\n$a = $true ? 1 : 2\n",
		"ps7-null-coalesce.ps1": good + "\n$b = $null ?? 3\n",
	}
	dir := t.TempDir()
	var files []string
	for name, s := range broken {
		if s == good {
			t.Fatalf("%s: the mutation did not change install.ps1", name)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, p := range parsePS1(t, files...) {
		if len(p.Errors) == 0 && len(p.PS7) == 0 {
			t.Errorf("%s: the parser found nothing wrong", filepath.Base(p.File))
		}
	}
}

// TestPowerShellCompletionParses parses `luft completion powershell` as it is generated.
func TestPowerShellCompletionParses(t *testing.T) {
	ps1Parser(t)  // before the build: a missing parser skips at once
	getRelease(t) // builds luft
	out, err := exec.Command(filepath.Join(scratch, "luft-1.1.0"), "completion", "powershell").Output()
	if err != nil {
		t.Fatalf("luft completion powershell: %v", err)
	}
	f := filepath.Join(t.TempDir(), "luft-completion.ps1")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	p := parsePS1(t, f)[0]
	if len(p.Errors) > 0 {
		t.Errorf("luft completion powershell does not parse:\n%s", strings.Join(p.Errors, "\n"))
	}
	if !slices.Contains(p.Commands, "Register-ArgumentCompleter") {
		t.Errorf("luft completion powershell registers no completer (commands: %v)", p.Commands)
	}
}

// The two installers agree on what they download and from where.
func TestInstallersAgree(t *testing.T) {
	sh, err := os.ReadFile(filepath.Join(repoRoot, "install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := os.ReadFile(filepath.Join(repoRoot, "install.ps1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"https://github.com/luft-run/luft/releases", "LUFT_INSTALL_BASE_URL", "github.com/luft-run/luft/cmd/luft",
		"/latest/download", "/download/", "checksums.txt", ".luft",
		`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`,
	} {
		if !strings.Contains(string(sh), want) || !strings.Contains(string(ps), want) {
			t.Errorf("install.sh and install.ps1 do not both contain %q", want)
		}
	}
	// Archive names: luft_<os>_<arch>.tar.gz and, on Windows, .zip (as .goreleaser.yaml makes).
	if !regexp.MustCompile(`archive=luft_\$\{os\}_\$\{arch\}\.tar\.gz`).Match(sh) {
		t.Error("install.sh does not download luft_${os}_${arch}.tar.gz")
	}
	if !strings.Contains(string(ps), `"luft_${Os}_${Arch}.zip"`) || !strings.Contains(string(ps), `"luft_${Os}_${Arch}.tar.gz"`) {
		t.Error("install.ps1 does not download luft_${Os}_${Arch}.zip (.tar.gz off Windows)")
	}
}
