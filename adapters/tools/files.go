package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// builtins returns the built-in tools over e.
func builtins(e *env) []Tool {
	return []Tool{
		&readFile{e}, &listDir{e}, &searchFiles{e}, &writeFile{e}, &editFile{e}, &runCommand{e},
	}
}

// isBinary reports whether the start of a file looks binary: it holds a NUL byte.
func isBinary(head []byte) bool {
	return bytes.IndexByte(head[:min(len(head), binarySniff)], 0) >= 0
}

// size says n bytes the way the caps are usually set.
func size(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// cutUTF8 returns the longest prefix of b no longer than n that does not split a rune.
func cutUTF8(b []byte, n int) []byte {
	if n >= len(b) {
		return b
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return b[:n]
}

// statRegular checks that rel is a regular file before it is opened, so a directory or
// a FIFO gets a pointed message. It is only a first answer: rel may be replaced after
// it, so the file is checked again through its descriptor once open (openRegular,
// Guard.Open).
func statRegular(tool string, root *os.Root, w workspace, p, rel string) (os.FileInfo, error) {
	fi, err := root.Stat(rel)
	if err != nil {
		return nil, w.pathErr(tool, p, err)
	}
	return fi, checkRegular(tool, p, fi)
}

// checkRegular refuses what is not a regular file, so a FIFO or a device never blocks
// or floods a call, and a directory gets a pointed message.
func checkRegular(tool, p string, fi os.FileInfo) error {
	if fi.IsDir() {
		return fmt.Errorf("%s: %q is a directory, not a file (list_dir shows its entries)", tool, p)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %q is not a regular file (it is %s)", tool, p, fileKind(fi.Mode()))
	}
	return nil
}

// fileKind names what a file that is not a regular one is.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeDir != 0:
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "of type " + m.Type().String()
}

// openRegular opens rel for reading (see openRead) and refuses it unless the descriptor
// is on a regular file: what was checked is what is read, whatever replaced the name
// after a Stat.
func openRegular(tool string, root *os.Root, w workspace, p, rel string) (*os.File, error) {
	f, fi, err := openRead(root, rel)
	if err != nil {
		return nil, w.pathErr(tool, p, err)
	}
	if err := checkRegular(tool, p, fi); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ---- read_file

type readFile struct{ e *env }

func (t *readFile) Spec() Spec {
	return Spec{
		Name: "read_file",
		Description: fmt.Sprintf("Read a text file in the workspace. Returns the file's text exactly "+
			"(no line numbers). For a long file pass offset (the 1-based line to start at) and limit "+
			"(how many lines). Output is capped at %s; a note at the end says when it was cut "+
			"and which offset reads on. Binary files are refused.", size(t.e.lim.readBytes)),
		Parameters: object(map[string]any{
			"path":   prop("string", "File path, relative to the workspace."),
			"offset": map[string]any{"type": "integer", "minimum": 1, "description": "1-based line number to start reading at (default 1)."},
			"limit":  map[string]any{"type": "integer", "minimum": 1, "description": "Maximum number of lines to return (default: to the end of the file, within the size cap)."},
		}, "path"),
	}
}

func (t *readFile) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "read_file"
	var a struct {
		Path   string `json:"path"`
		Offset int    `json:"offset"`
		Limit  int    `json:"limit"`
	}
	if err := decodeArgs(name, raw, &a, "{path, offset?, limit?}"); err != nil {
		return "", err
	}
	if a.Path == "" {
		return "", errMissing(name, "path")
	}
	if a.Offset < 0 || a.Limit < 0 {
		return "", fmt.Errorf("%s: offset and limit must be positive (offset is a 1-based line number, limit a line count)", name)
	}
	start := max(a.Offset, 1)
	w := t.e.ws
	root, rel, err := w.openPath(name, a.Path, false)
	if err != nil {
		return "", err
	}
	defer root.Close()
	f, err := openRegular(name, root, w, a.Path, rel)
	if err != nil {
		return "", err
	}
	defer f.Close()

	br := bufio.NewReaderSize(f, 32<<10)
	head, err := br.Peek(binarySniff)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return "", w.pathErr(name, a.Path, err)
	}
	if isBinary(head) {
		return "", fmt.Errorf("%s: %q looks like a binary file (it contains NUL bytes); read_file reads text files only", name, a.Path)
	}

	budget := t.e.lim.readBytes
	var (
		out       bytes.Buffer
		line      int // lines seen so far (the current one included)
		atStart   = true
		lineStart int // out.Len() where the current line began
		last      int // last line shown in full
		note      string
		stop      bool
	)
	for !stop {
		seg, err := br.ReadSlice('\n')
		if len(seg) > 0 {
			if atStart {
				line++
				atStart = false
				lineStart = out.Len()
				if a.Limit > 0 && line >= start+a.Limit {
					note = fmt.Sprintf("[showing lines %d-%d; the file goes on: read on with offset=%d]", start, last, line)
					break
				}
			}
			if line >= start {
				if out.Len()+len(seg) > budget {
					if lineStart > 0 {
						// Drop the partial line: the next read starts cleanly at it.
						out.Truncate(lineStart)
						note = fmt.Sprintf("[truncated: output is capped at %s; showing lines %d-%d, read on with offset=%d]",
							size(budget), start, last, line)
					} else {
						out.Write(cutUTF8(seg, budget-out.Len()))
						note = fmt.Sprintf("[truncated: line %d is longer than the %s cap and was cut; read on with offset=%d]",
							line, size(budget), line+1)
					}
					break
				}
				out.Write(seg)
				last = line
			}
			if seg[len(seg)-1] == '\n' {
				atStart = true
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			stop = true
		default:
			return "", w.pathErr(name, a.Path, err)
		}
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
	}
	if note == "" {
		switch {
		case line == 0:
			note = "[empty file]"
		case start > line:
			note = fmt.Sprintf("[offset %d is past the end: the file has %d lines]", start, line)
		}
	}
	if note == "" {
		return out.String(), nil
	}
	if out.Len() > 0 && !bytes.HasSuffix(out.Bytes(), []byte("\n")) {
		out.WriteByte('\n')
	}
	out.WriteString(note)
	return out.String(), nil
}

// ---- list_dir

type listDir struct{ e *env }

func (t *listDir) Spec() Spec {
	return Spec{
		Name: "list_dir",
		Description: fmt.Sprintf("List a directory in the workspace: one entry per line, sorted by name, "+
			"directories marked with a trailing \"/\". At most %d entries are shown.", t.e.lim.listEntries),
		Parameters: object(map[string]any{
			"path": prop("string", "Directory path, relative to the workspace (default \".\", the workspace itself)."),
		}),
	}
}

func (t *listDir) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "list_dir"
	var a struct {
		Path string `json:"path"`
	}
	if err := decodeArgs(name, raw, &a, "{path?}"); err != nil {
		return "", err
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
	// Checked through the descriptor: a folder swapped for a FIFO after a Stat would
	// otherwise hold the open until a writer came.
	d, fi, err := openRead(root, rel)
	if err != nil {
		return "", w.pathErr(name, a.Path, err)
	}
	defer d.Close()
	switch {
	case fi.Mode().IsRegular():
		return "", fmt.Errorf("%s: %q is a file, not a directory (read_file reads it)", name, a.Path)
	case !fi.IsDir():
		return "", fmt.Errorf("%s: %q is not a directory (it is %s)", name, a.Path, fileKind(fi.Mode()))
	}
	entries, err := d.ReadDir(-1)
	if err != nil {
		return "", w.pathErr(name, a.Path, err)
	}
	if len(entries) == 0 {
		return "(empty directory)", nil
	}
	slices.SortFunc(entries, func(x, y os.DirEntry) int { return strings.Compare(x.Name(), y.Name()) })
	var b strings.Builder
	for i, ent := range entries {
		if i == t.e.lim.listEntries {
			fmt.Fprintf(&b, "[%d more entries not shown]\n", len(entries)-i)
			break
		}
		b.WriteString(ent.Name())
		switch {
		case ent.IsDir():
			b.WriteByte('/')
		case ent.Type()&os.ModeSymlink != 0:
			// Mark a link by where it leads, through the root so an outside target is
			// only named as such, never looked at.
			target, err := root.Stat(filepath.Join(rel, ent.Name()))
			switch {
			case escapes(err):
				b.WriteString(" (symbolic link leading outside the workspace)")
			case err != nil:
				b.WriteString(" (broken symbolic link)")
			case target.IsDir():
				b.WriteByte('/')
			}
		}
		b.WriteByte('\n')
	}
	return strings.TrimSuffix(b.String(), "\n"), ctx.Err()
}

// ---- write_file

type writeFile struct{ e *env }

func (t *writeFile) Spec() Spec {
	return Spec{
		Name: "write_file",
		Description: "Write a text file in the workspace, replacing its content if it exists. " +
			"Missing parent directories are created. To change part of a file, prefer edit_file.",
		Parameters: object(map[string]any{
			"path":    prop("string", "File path, relative to the workspace."),
			"content": prop("string", "The complete new content of the file."),
		}, "path", "content"),
		Destructive: true,
	}
}

func (t *writeFile) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "write_file"
	var a struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
	}
	if err := decodeArgs(name, raw, &a, "{path, content}"); err != nil {
		return "", err
	}
	if a.Path == "" {
		return "", errMissing(name, "path")
	}
	if a.Content == nil {
		return "", errMissing(name, "content")
	}
	w := t.e.ws
	root, rel, err := w.openPath(name, a.Path, true)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if rel == "." {
		return "", fmt.Errorf("%s: %q is the workspace directory itself; give a file path inside it", name, a.Path)
	}
	if fi, err := root.Stat(rel); err == nil && fi.IsDir() {
		return "", fmt.Errorf("%s: %q is a directory; give a file path", name, a.Path)
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	existed, err := w.guard.WriteFile(root, rel, []byte(*a.Content))
	if err != nil {
		return "", w.pathErr(name, a.Path, err)
	}
	what := "created"
	if existed {
		what = "replaced"
	}
	return fmt.Sprintf("wrote %d bytes to %s (%s)", len(*a.Content), filepath.ToSlash(rel), what), nil
}

// ---- edit_file

type editFile struct{ e *env }

func (t *editFile) Spec() Spec {
	return Spec{
		Name: "edit_file",
		Description: "Replace text in a file in the workspace. old_string must match the file exactly, " +
			"whitespace and indentation included, and must occur exactly once unless replace_all is true; " +
			"include enough surrounding lines to make it unique. Read the file first.",
		Parameters: object(map[string]any{
			"path":        prop("string", "File path, relative to the workspace."),
			"old_string":  prop("string", "The exact text to replace."),
			"new_string":  prop("string", "The text to put in its place (may be empty, to delete)."),
			"replace_all": prop("boolean", "Replace every occurrence of old_string instead of exactly one (default false)."),
		}, "path", "old_string", "new_string"),
		Destructive: true,
	}
}

func (t *editFile) Call(ctx context.Context, raw json.RawMessage) (string, error) {
	const name = "edit_file"
	var a struct {
		Path       string  `json:"path"`
		OldString  string  `json:"old_string"`
		NewString  *string `json:"new_string"`
		ReplaceAll bool    `json:"replace_all"`
	}
	if err := decodeArgs(name, raw, &a, "{path, old_string, new_string, replace_all?}"); err != nil {
		return "", err
	}
	switch {
	case a.Path == "":
		return "", errMissing(name, "path")
	case a.OldString == "":
		return "", fmt.Errorf("%s: old_string is empty; give the exact text to replace (to create a file use write_file)", name)
	case a.NewString == nil:
		return "", errMissing(name, "new_string")
	case a.OldString == *a.NewString:
		return "", fmt.Errorf("%s: old_string and new_string are the same; nothing would change", name)
	}
	w := t.e.ws
	root, rel, err := w.openPath(name, a.Path, true)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if _, err := statRegular(name, root, w, a.Path, rel); err != nil {
		return "", err
	}
	f, _, err := w.guard.Open(root, rel, false, 0)
	if err != nil {
		return "", w.pathErr(name, a.Path, err)
	}
	data, err := readAll(f)
	if err != nil {
		f.Close()
		return "", w.pathErr(name, a.Path, err)
	}
	if isBinary(data) {
		f.Close()
		return "", fmt.Errorf("%s: %q looks like a binary file (it contains NUL bytes); edit_file edits text files only", name, a.Path)
	}
	text := string(data)
	n := strings.Count(text, a.OldString)
	switch {
	case n == 0:
		f.Close()
		return "", fmt.Errorf("%s: old_string was not found in %q; it must match the file exactly, whitespace and indentation included (read_file shows the current text)", name, a.Path)
	case n > 1 && !a.ReplaceAll:
		f.Close()
		return "", fmt.Errorf("%s: old_string occurs %d times in %q; include more surrounding text so it occurs once, or set replace_all to true to replace all %d", name, n, a.Path, n)
	}
	if a.ReplaceAll {
		text = strings.ReplaceAll(text, a.OldString, *a.NewString)
	} else {
		text = strings.Replace(text, a.OldString, *a.NewString, 1)
	}
	if err := ctx.Err(); err != nil {
		f.Close()
		return "", fmt.Errorf("%s: %w", name, err)
	}
	// Through the descriptor that was checked and read: the file keeps its mode.
	if err := replace(f, []byte(text)); err != nil {
		return "", w.pathErr(name, a.Path, err)
	}
	noun := "occurrence"
	if n > 1 {
		noun = "occurrences"
	}
	return fmt.Sprintf("replaced %d %s in %s", n, noun, filepath.ToSlash(rel)), nil
}
