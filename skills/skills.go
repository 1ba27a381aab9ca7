package skills

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

//go:embed luft-workflows
var files embed.FS

// Name is the skill's name: its folder and the name in its front matter.
const Name = "luft-workflows"

// FS is the skill as a file system rooted at its folder (SKILL.md, references/...).
func FS() fs.FS {
	sub, err := fs.Sub(files, Name)
	if err != nil {
		panic(err) // the folder is embedded at build time; fs.Sub only fails on a bad name
	}
	return sub
}

// Files lists the skill's files, slash-separated paths relative to its folder, SKILL.md
// first.
func Files() []string {
	var out []string
	_ = fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && p != "SKILL.md" {
			out = append(out, p)
		}
		return nil
	})
	return append([]string{"SKILL.md"}, out...)
}

// Read returns one file of the skill.
func Read(name string) (string, error) {
	b, err := fs.ReadFile(FS(), name)
	if err != nil {
		return "", fmt.Errorf("skill file %s: %w", name, err)
	}
	return string(b), nil
}

// Text is the whole skill as one markdown document (SKILL.md, then each reference under a
// heading naming its file): what the planner gives the model.
func Text() string {
	var b strings.Builder
	for _, name := range Files() {
		s, err := Read(name)
		if err != nil {
			continue // cannot happen for a name Files listed
		}
		if name != "SKILL.md" {
			fmt.Fprintf(&b, "\n\n<!-- %s -->\n\n", name)
		}
		b.WriteString(strings.TrimSpace(s))
		b.WriteString("\n")
	}
	return b.String()
}

// Dump writes the skill under dir/luft-workflows/ (the layout coding agents read skills
// from, e.g. ~/.claude/skills), creating folders as needed. Existing files of the skill are
// replaced; other files are left alone. It returns the folder written.
func Dump(dir string) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("skill-dump: no folder given (example: luft skill-dump ~/.claude/skills)")
	}
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		return "", fmt.Errorf("skill-dump %s: not a folder (give a folder to write %s/ into)", dir, Name)
	}
	root := filepath.Join(dir, Name)
	for _, name := range Files() {
		body, err := Read(name)
		if err != nil {
			return "", err
		}
		dst := filepath.Join(root, filepath.FromSlash(path.Clean(name)))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", fmt.Errorf("skill-dump: create %s: %w", filepath.Dir(dst), err)
		}
		if err := os.WriteFile(dst, []byte(body), 0o644); err != nil {
			return "", fmt.Errorf("skill-dump: write %s: %w", dst, err)
		}
	}
	return root, nil
}

// FrontMatter returns the name and description of SKILL.md's front matter.
func FrontMatter() (name, description string, err error) {
	s, err := Read("SKILL.md")
	if err != nil {
		return "", "", err
	}
	rest, ok := strings.CutPrefix(s, "---\n")
	if !ok {
		return "", "", fmt.Errorf("SKILL.md: no front matter (it must start with ---)")
	}
	head, _, ok := strings.Cut(rest, "\n---\n")
	if !ok {
		return "", "", fmt.Errorf("SKILL.md: front matter is not closed with ---")
	}
	for _, line := range strings.Split(head, "\n") {
		k, v, _ := strings.Cut(line, ":")
		switch strings.TrimSpace(k) {
		case "name":
			name = strings.TrimSpace(v)
		case "description":
			description = strings.TrimSpace(v)
		}
	}
	return name, description, nil
}
