package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

type searchFiles struct{ e *env }

func (t *searchFiles) Spec() Spec {
	return Spec{
		Name: "search_files",
		Description: fmt.Sprintf("Search the text files under a directory of the workspace for lines matching "+
			"a regular expression (Go RE2 syntax, e.g. \"^func [A-Z]\", \"(?i)todo\"). Prints one "+
			"match per line as \"path:line: text\", paths relative to the workspace. Skips .git, binary "+
			"files, symbolic links and files over %d MiB. Stops after %d matches; narrow the pattern, "+
			"path or glob when it does.", t.e.lim.searchFile>>20, t.e.lim.matches),
		Parameters: object(map[string]any{
			"pattern": prop("string", "Regular expression to look for in each line (Go RE2 syntax)."),
			"path":    prop("string", "Directory (or single file) to search, relative to the workspace (default \".\")."),
			"glob": prop("string", "Only search files whose name matches this glob, e.g. \"*.go\". A glob with \"/\" "+
				"is matched against the path from the workspace; \"**\" there spans directories, e.g. \"cmd/**/*.go\"."),
		}, "pattern"),
	}
}

// errEnough stops the walk once the match cap is reached.
var errEnough = errors.New("enough matches")

func (t *searchFiles) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "search_files"
	var a struct {
		Pattern string `json:"pattern"`
		Path    string `json:"path"`
		Glob    string `json:"glob"`
	}
	if err := decodeArgs(name, raw, &a, "{pattern, path?, glob?}"); err != nil {
		return "", err
	}
	if a.Pattern == "" {
		return "", errMissing(name, "pattern")
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return "", fmt.Errorf("%s: pattern %q is not a valid regular expression: %v (Go RE2 syntax; escape literal characters such as ( or . with \\)",
			name, a.Pattern, err)
	}
	if a.Glob != "" {
		if _, err := path.Match(strings.ReplaceAll(a.Glob, "**", "*"), ""); err != nil {
			return "", fmt.Errorf("%s: glob %q is malformed: %v", name, a.Glob, err)
		}
	}
	if a.Path == "" {
		a.Path = "."
	}
	w := t.e.ws
	root, rel, err := w.openPath(name, a.Path, false)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if _, err := root.Stat(rel); err != nil {
		return "", w.pathErr(name, a.Path, err)
	}

	lim := t.e.lim
	fsys := nonblockFS{root}
	start := filepath.ToSlash(rel)
	var (
		out     strings.Builder
		matches int
		full    bool // the output size cap was hit
		capped  bool // the match cap was hit
	)
	walkErr := fs.WalkDir(fsys, start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start {
				return err
			}
			return nil // an unreadable entry below the start is skipped, not fatal
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" && p != start {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if a.Glob != "" && !matchGlob(a.Glob, p, d.Name()) {
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > lim.searchFile {
			return nil
		}
		data, ok := readSearched(root, p, lim.searchFile)
		if !ok || isBinary(data) {
			return nil
		}
		n := 0
		for line := range bytes.Lines(data) {
			n++
			line = bytes.TrimRight(line, "\r\n")
			if !re.Match(line) {
				continue
			}
			if matches == lim.matches {
				capped = true
				return errEnough
			}
			text := string(cutUTF8(line, lim.matchLine))
			if len(text) < len(line) {
				text += " …"
			}
			entry := fmt.Sprintf("%s:%d: %s\n", p, n, text)
			if out.Len()+len(entry) > lim.searchOutput {
				full = true
				return errEnough
			}
			out.WriteString(entry)
			matches++
		}
		return nil
	})
	switch {
	case walkErr == nil, errors.Is(walkErr, errEnough):
	case errors.Is(walkErr, context.Canceled), errors.Is(walkErr, context.DeadlineExceeded):
		return "", fmt.Errorf("%s: %w", name, walkErr)
	default:
		return "", w.pathErr(name, a.Path, walkErr)
	}
	if matches == 0 {
		where := "the workspace"
		if start != "." {
			where = start
		}
		if a.Glob != "" {
			where += fmt.Sprintf(" (files matching %q)", a.Glob)
		}
		return fmt.Sprintf("no matches for %q in %s", a.Pattern, where), nil
	}
	switch {
	case full:
		fmt.Fprintf(&out, "[stopped after %d matches: the output cap of %s was reached; narrow the pattern, path or glob]",
			matches, size(lim.searchOutput))
	case capped:
		fmt.Fprintf(&out, "[stopped after %d matches, the most shown at once; there are more: narrow the pattern, path or glob]", matches)
	}
	return strings.TrimSuffix(out.String(), "\n"), nil
}

// matchGlob matches a file against glob: by its name when glob has no "/", otherwise by
// its slash path from the workspace, where a "**" segment spans any number of directories.
func matchGlob(glob, p, name string) bool {
	if !strings.Contains(glob, "/") {
		ok, _ := path.Match(glob, name)
		return ok
	}
	return matchSegments(strings.Split(glob, "/"), strings.Split(p, "/"))
}

func matchSegments(glob, parts []string) bool {
	for len(glob) > 0 {
		if glob[0] == "**" {
			for i := 0; i <= len(parts); i++ {
				if matchSegments(glob[1:], parts[i:]) {
					return true
				}
			}
			return false
		}
		if len(parts) == 0 {
			return false
		}
		if ok, _ := path.Match(glob[0], parts[0]); !ok {
			return false
		}
		glob, parts = glob[1:], parts[1:]
	}
	return len(parts) == 0
}

// readSearched reads the file at p (a slash path in root) for search_files, or says it
// is to be skipped. The walk saw a regular file no bigger than max, but the name may
// have been replaced since: the descriptor is checked again, and no more than max bytes
// are read.
func readSearched(root *os.Root, p string, max int64) ([]byte, bool) {
	f, fi, err := openRead(root, filepath.FromSlash(p))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if !fi.Mode().IsRegular() || fi.Size() > max {
		return nil, false
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil || int64(len(data)) > max {
		return nil, false
	}
	return data, true
}

// nonblockFS is root as an fs.FS whose opens do not wait (see openRead): the walk opens
// every folder it lists, and a folder swapped for a FIFO must not stall it.
type nonblockFS struct{ root *os.Root }

func (n nonblockFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	f, _, err := openRead(n.root, filepath.FromSlash(name))
	if err != nil {
		return nil, err
	}
	return f, nil
}
