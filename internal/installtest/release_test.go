package installtest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// repoRoot is where install.sh, install.ps1 and .goreleaser.yaml live.
var repoRoot = filepath.Join("..", "..")

// goreleaserConfig is the part of .goreleaser.yaml the installers depend on.
type goreleaserConfig struct {
	ProjectName string `yaml:"project_name"`
	Builds      []struct {
		Main    string   `yaml:"main"`
		Binary  string   `yaml:"binary"`
		Env     []string `yaml:"env"`
		Goos    []string `yaml:"goos"`
		Goarch  []string `yaml:"goarch"`
		Flags   []string `yaml:"flags"`
		Ldflags []string `yaml:"ldflags"`
	} `yaml:"builds"`
	Archives []struct {
		NameTemplate    string   `yaml:"name_template"`
		Formats         []string `yaml:"formats"`
		FormatOverrides []struct {
			Goos    string   `yaml:"goos"`
			Formats []string `yaml:"formats"`
		} `yaml:"format_overrides"`
	} `yaml:"archives"`
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
		Algorithm    string `yaml:"algorithm"`
	} `yaml:"checksum"`
}

func loadGoreleaser() (*goreleaserConfig, error) {
	b, err := os.ReadFile(filepath.Join(repoRoot, ".goreleaser.yaml"))
	if err != nil {
		return nil, err
	}
	var c goreleaserConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse .goreleaser.yaml: %w", err)
	}
	if len(c.Builds) != 1 || len(c.Archives) != 1 {
		return nil, fmt.Errorf(".goreleaser.yaml: want one build and one archive, got %d and %d", len(c.Builds), len(c.Archives))
	}
	return &c, nil
}

// expand fills in the goreleaser template fields the config may use; any other field is an
// error, so the config cannot start depending on one that these tests do not model.
func expand(tmpl string, fields map[string]string) (string, error) {
	pairs := make([]string, 0, 4*len(fields))
	for k, v := range fields {
		pairs = append(pairs, "{{ ."+k+" }}", v, "{{."+k+"}}", v)
	}
	out := strings.NewReplacer(pairs...).Replace(tmpl)
	if strings.Contains(out, "{{") {
		return "", fmt.Errorf("template %q uses a field other than %v", tmpl, sortedKeys(fields))
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// archiveName is the release file for one platform, as .goreleaser.yaml names it.
func (c *goreleaserConfig) archiveName(goos, goarch string) (string, error) {
	a := c.Archives[0]
	base, err := expand(a.NameTemplate, map[string]string{"ProjectName": c.ProjectName, "Os": goos, "Arch": goarch})
	if err != nil {
		return "", err
	}
	formats := a.Formats
	for _, o := range a.FormatOverrides {
		if o.Goos == goos {
			formats = o.Formats
		}
	}
	if len(formats) != 1 {
		return "", fmt.Errorf("archive for %s: want one format, got %v", goos, formats)
	}
	return base + "." + formats[0], nil
}

// release is what the install tests share: luft built twice for the host (as v1.0.0 and
// v1.1.0) and a release tree that holds them.
type release struct {
	root    string // serve this: download/vX.Y.Z/FILE
	commit  string
	date    string
	archive string // the host's archive name
	config  *goreleaserConfig
}

var (
	releaseOnce sync.Once
	releaseVal  *release
	releaseErr  error
	scratch     string // removed by TestMain
)

func TestMain(m *testing.M) {
	var err error
	scratch, err = os.MkdirTemp("", "luft-installtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(scratch)
	os.Exit(code)
}

// getRelease builds the release tree once per test binary.
func getRelease(t *testing.T) *release {
	t.Helper()
	releaseOnce.Do(func() { releaseVal, releaseErr = buildRelease(scratch) })
	if releaseErr != nil {
		t.Fatal(releaseErr)
	}
	return releaseVal
}

const (
	testCommit = "0123456789abcdef0123456789abcdef01234567"
	testDate   = "2026-03-04T05:06:07Z"
)

func buildRelease(dir string) (*release, error) {
	cfg, err := loadGoreleaser()
	if err != nil {
		return nil, err
	}
	r := &release{root: filepath.Join(dir, "release"), commit: testCommit, date: testDate, config: cfg}
	if r.archive, err = cfg.archiveName(runtime.GOOS, runtime.GOARCH); err != nil {
		return nil, err
	}
	bins := map[string][]byte{}
	for _, v := range []string{"1.0.0", "1.1.0"} {
		out := filepath.Join(dir, "luft-"+v)
		if err := buildLuft(cfg, out, v); err != nil {
			return nil, err
		}
		if bins[v], err = os.ReadFile(out); err != nil {
			return nil, err
		}
	}
	// Each version is one case of the tests; all but v1.1.0 reuse v1.0.0's binary.
	type layout struct {
		bin               []byte
		skipHost          bool // no archive for this platform: the go install fallback
		tamper            bool // the host archive differs from its checksum
		noHostSum, noSums bool // checksums.txt lacks the host's line / is missing
	}
	versions := map[string]layout{
		"v1.0.0": {bin: bins["1.0.0"]},
		"v1.1.0": {bin: bins["1.1.0"]},
		"v1.2.0": {bin: bins["1.0.0"], skipHost: true},
		"v1.3.0": {bin: bins["1.0.0"], tamper: true},
		"v1.4.0": {bin: bins["1.0.0"], noHostSum: true},
		"v1.5.0": {bin: bins["1.0.0"], noSums: true},
	}
	b := cfg.Builds[0]
	for v, l := range versions {
		vdir := filepath.Join(r.root, "download", v)
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return nil, err
		}
		var sums strings.Builder
		for _, goos := range b.Goos {
			for _, goarch := range b.Goarch {
				name, err := cfg.archiveName(goos, goarch)
				if err != nil {
					return nil, err
				}
				host := goos == runtime.GOOS && goarch == runtime.GOARCH
				if host && l.skipHost {
					continue
				}
				bin := l.bin
				if !host {
					// A stand-in with the real layout: a different platform's binary would
					// not run here anyway.
					bin = []byte(fmt.Sprintf("#!/bin/sh\necho 'luft stand-in for %s/%s %s'\n", goos, goarch, v))
				}
				data, err := packArchive(name, b.Binary, goos, bin)
				if err != nil {
					return nil, err
				}
				if !(host && l.noHostSum) {
					fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(data), name)
				}
				if host && l.tamper {
					// A well-formed archive with another binary in it: only the checksum
					// can tell.
					if data, err = packArchive(name, b.Binary, goos, []byte("#!/bin/sh\necho tampered\n")); err != nil {
						return nil, err
					}
				}
				if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
					return nil, err
				}
			}
		}
		if !l.noSums {
			sumsName, err := expand(cfg.Checksum.NameTemplate, nil)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(filepath.Join(vdir, sumsName), []byte(sums.String()), 0o644); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

// buildLuft builds cmd/luft for the host as .goreleaser.yaml's build says: its env, flags
// and ldflags, with the template fields filled in.
func buildLuft(cfg *goreleaserConfig, out, ver string) error {
	b := cfg.Builds[0]
	args := append([]string{"build", "-o", out}, b.Flags...)
	var ld []string
	for _, f := range b.Ldflags {
		s, err := expand(f, map[string]string{"Version": ver, "FullCommit": testCommit, "Date": testDate})
		if err != nil {
			return err
		}
		ld = append(ld, s)
	}
	args = append(args, "-ldflags", strings.Join(ld, " "), b.Main)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), b.Env...)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return nil
}

// packArchive makes a release archive: the binary (luft.exe on Windows) and a README, in
// a zip or a tar.gz as the name says.
func packArchive(name, binary, goos string, bin []byte) ([]byte, error) {
	if goos == "windows" {
		binary += ".exe"
	}
	files := []struct {
		name string
		mode int64
		data []byte
	}{{binary, 0o755, bin}, {"README.md", 0o644, []byte("# luft\n")}}
	var buf bytes.Buffer
	switch {
	case strings.HasSuffix(name, ".zip"):
		zw := zip.NewWriter(&buf)
		for _, f := range files {
			w, err := zw.Create(f.name)
			if err != nil {
				return nil, err
			}
			if _, err := w.Write(f.data); err != nil {
				return nil, err
			}
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
	case strings.HasSuffix(name, ".tar.gz"):
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
		tw := tar.NewWriter(gz)
		for _, f := range files {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
				return nil, err
			}
			if _, err := tw.Write(f.data); err != nil {
				return nil, err
			}
		}
		if err := errors.Join(tw.Close(), gz.Close()); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("archive %s: unknown format", name)
	}
	return buf.Bytes(), nil
}

// TestGoreleaserConfig checks that .goreleaser.yaml builds what the installers download:
// every platform they support, with CGO off, named as they expect, with a checksums.txt,
// and that its -X flags name variables that internal/version has.
func TestGoreleaserConfig(t *testing.T) {
	cfg, err := loadGoreleaser()
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Builds[0]
	if b.Main != "./cmd/luft" || b.Binary != "luft" {
		t.Errorf("build main/binary = %q/%q, want ./cmd/luft/luft", b.Main, b.Binary)
	}
	if !slices.Contains(b.Env, "CGO_ENABLED=0") {
		t.Errorf("build env %v lacks CGO_ENABLED=0", b.Env)
	}
	for _, want := range []string{"linux", "darwin", "windows"} {
		if !slices.Contains(b.Goos, want) {
			t.Errorf("goos %v lacks %s", b.Goos, want)
		}
	}
	for _, want := range []string{"amd64", "arm64"} {
		if !slices.Contains(b.Goarch, want) {
			t.Errorf("goarch %v lacks %s", b.Goarch, want)
		}
	}
	for _, p := range [][3]string{
		{"linux", "amd64", "luft_linux_amd64.tar.gz"},
		{"darwin", "arm64", "luft_darwin_arm64.tar.gz"},
		{"windows", "amd64", "luft_windows_amd64.zip"},
		{"windows", "arm64", "luft_windows_arm64.zip"},
	} {
		got, err := cfg.archiveName(p[0], p[1])
		if err != nil || got != p[2] {
			t.Errorf("archive for %s/%s = %q (%v), want %q (the name install.sh and install.ps1 download)", p[0], p[1], got, err, p[2])
		}
	}
	if cfg.Checksum.NameTemplate != "checksums.txt" || cfg.Checksum.Algorithm != "sha256" {
		t.Errorf("checksum = %+v, want checksums.txt with sha256", cfg.Checksum)
	}

	// Every -X names a variable of internal/version, and all three are stamped.
	vars := versionVars(t)
	var stamped []string
	for _, f := range b.Ldflags {
		fields := strings.Fields(f)
		for i, w := range fields {
			if w != "-X" || i+1 == len(fields) {
				continue
			}
			name, _, _ := strings.Cut(fields[i+1], "=")
			i := strings.LastIndex(name, ".")
			if i < 0 {
				t.Errorf("ldflags -X %s: not PACKAGE.VARIABLE", name)
				continue
			}
			pkg, v := name[:i], name[i+1:]
			if pkg != "github.com/luft-run/luft/internal/version" || !vars[v] {
				t.Errorf("ldflags -X %s: no such variable in internal/version (it has %v)", name, vars)
			}
			stamped = append(stamped, v)
		}
	}
	sort.Strings(stamped)
	if !slices.Equal(stamped, []string{"Commit", "Date", "Version"}) {
		t.Errorf("ldflags stamp %v, want Commit, Date and Version", stamped)
	}

	// goreleaser's own check, where it is installed.
	if path, err := exec.LookPath("goreleaser"); err == nil {
		cmd := exec.Command(path, "check")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("goreleaser check: %v\n%s", err, out)
		}
	} else {
		t.Log("goreleaser is not installed: its own check was not run")
	}
}

// versionVars lists the package-level variables of internal/version.
func versionVars(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", "version", "version.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			for _, n := range s.(*ast.ValueSpec).Names {
				vars[n.Name] = true
			}
		}
	}
	return vars
}
