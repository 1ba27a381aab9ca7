package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// luaBlock is a fenced Lua example in a docs page.
var luaBlock = regexp.MustCompile("(?s)```lua\n(.*?)```")

// TestDocsExamples runs every Lua example of docs/*.md on the mock backend: each must be a
// complete workflow that completes. A block whose first line is `-- file: PATH` is a helper
// file the other examples of its page load with workflow(); it is written, not run.
func TestDocsExamples(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs pages (%v)", err)
	}
	total := 0
	for _, page := range pages {
		src, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		var runs []string
		for _, m := range luaBlock.FindAllSubmatch(src, -1) {
			code := string(m[1])
			first, _, _ := strings.Cut(code, "\n")
			if name, ok := strings.CutPrefix(first, "-- file: "); ok {
				path := filepath.Join(dir, filepath.FromSlash(strings.TrimSpace(name)))
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(code), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if !strings.Contains(code, "function main()") {
				t.Errorf("%s: a Lua example is not a complete workflow (no main):\n%s", filepath.Base(page), code)
				continue
			}
			runs = append(runs, code)
		}
		for i, code := range runs {
			total++
			name := strings.TrimSuffix(filepath.Base(page), ".md")
			path := filepath.Join(dir, name+"-"+string(rune('a'+i%26))+".lua")
			if err := os.WriteFile(path, []byte(code), 0o644); err != nil {
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			code := execute(docsEnv(&out, &errb), []string{"--state-dir", filepath.Join(dir, ".luft"), "run", "-q", "-w", path,
				"--args", `{"name": "Ada"}`})
			if code != exitOK {
				t.Errorf("%s example %d exited %d:\n%s\n--- stderr\n%s", filepath.Base(page), i+1, code, readFile(t, path), errb.String())
			}
		}
	}
	if total < 10 {
		t.Fatalf("only %d runnable examples found in docs/", total)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docsEnv is a process environment for running the CLI in-process: no terminal, no
// config of the user's, the offline mock.
func docsEnv(stdout, stderr io.Writer) *env {
	vars := map[string]string{"HOME": os.TempDir(), "NO_COLOR": "1"}
	return &env{
		stdout: stdout, stderr: stderr,
		getenv: func(k string) string { return vars[k] },
		now:    time.Now,
		notify: func(chan<- os.Signal) func() { return func() {} },
		exit:   func(code int) { panic("exit during a docs example") },
	}
}

// notInBuildRow is a row of coming-from-luft.md's table whose luft column says some of
// Luft's commands are "not in this build".
var notInBuildRow = regexp.MustCompile("(?m)^\\| (.*?) \\| [^|\n]*not in this build[^|\n]* \\|")

// TestComingFromLuftNotInBuild checks that every command coming-from-luft.md calls "not in
// this build" really is missing from luft's command tree, so the page cannot send a user
// away from a command that exists.
func TestComingFromLuftNotInBuild(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "docs", "coming-from-luft.md"))
	if err != nil {
		t.Fatal(err)
	}
	root := newRootCmd(&env{stdout: io.Discard, stderr: io.Discard})
	for _, m := range notInBuildRow.FindAllStringSubmatch(string(src), -1) {
		for _, name := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(m[1], -1) {
			words := strings.Fields(strings.TrimPrefix(name[1], "luft "))
			if c, rest, err := root.Find(words); err == nil && c != root && len(rest) == 0 {
				t.Errorf("coming-from-luft.md says `%s` is not in this build, but `luft %s` is a command", name[1], strings.Join(words, " "))
			}
		}
	}
}
