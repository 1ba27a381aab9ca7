package agentinstall

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/skills"
)

// manifestName is the file in the skill's folder that records what luft wrote there (a
// hash per file), so that a later install replaces its own files without a backup, backs
// up a file the user changed, and an uninstall removes exactly luft's files.
const manifestName = ".luft-install.json"

type manifest struct {
	Files map[string]string `json:"files"`
}

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// planSkills works out, per skills folder, which of the skill's files to write or remove.
func planSkills(o Options, targets []*agent) ([]*skillPlan, error) {
	var plans []*skillPlan
	byDir := map[string]*skillPlan{}
	for _, a := range targets {
		dir := filepath.Join(a.skills, skills.Name)
		if p := byDir[dir]; p != nil {
			p.agents = append(p.agents, a.name)
			continue
		}
		p := &skillPlan{agents: []string{a.name}, dir: dir, files: map[string]string{}}
		byDir[dir] = p
		plans = append(plans, p)
	}
	var problems []error
	for _, p := range plans {
		if err := p.plan(o, targets); err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", strings.Join(p.agents, ", "), err))
		}
	}
	return plans, errors.Join(problems...)
}

func (p *skillPlan) plan(o Options, targets []*agent) error {
	if st, err := os.Stat(p.dir); err == nil && !st.IsDir() {
		return fmt.Errorf("%s is not a folder; move it away so luft can put its skill there", p.dir)
	}
	for _, name := range skills.Files() {
		body, err := skills.Read(name)
		if err != nil {
			return err
		}
		p.files[name] = body
	}
	m, err := readManifest(p.dir)
	if err != nil {
		return err
	}
	if o.Uninstall {
		if who := stillRegistered(o, targets, filepath.Dir(p.dir)); who != "" {
			p.keep = who + " still uses it"
			return nil
		}
		seen := map[string]bool{}
		for n := range p.files {
			seen[n] = true
		}
		for n := range m.Files {
			if safeSkillName(n) {
				seen[n] = true
			}
		}
		for _, n := range slices.Sorted(maps.Keys(seen)) {
			if _, err := os.Lstat(filepath.Join(p.dir, filepath.FromSlash(n))); err == nil {
				p.remove = append(p.remove, n)
			}
		}
		if _, err := os.Lstat(filepath.Join(p.dir, manifestName)); err == nil && len(p.remove) == 0 {
			p.remove = append(p.remove, manifestName)
		}
		return nil
	}
	for _, n := range skills.Files() {
		cur, err := os.ReadFile(filepath.Join(p.dir, filepath.FromSlash(n)))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("read %s: %w", filepath.Join(p.dir, n), err)
		}
		if err != nil || string(cur) != p.files[n] {
			p.write = append(p.write, n)
		}
	}
	if len(p.write) == 0 && !maps.Equal(m.Files, p.hashes()) {
		p.write = append(p.write, manifestName)
	}
	return nil
}

// safeSkillName keeps a manifest (a file anyone could edit) from naming a path outside the
// skill's folder.
func safeSkillName(n string) bool {
	return n != "" && !path.IsAbs(n) && path.Clean(n) == n && !strings.HasPrefix(n, "../") && n != ".." && !strings.Contains(n, "\\")
}

func (p *skillPlan) hashes() map[string]string {
	h := map[string]string{}
	for n, b := range p.files {
		h[n] = hashOf([]byte(b))
	}
	return h
}

func readManifest(dir string) (manifest, error) {
	var m manifest
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read %s: %w", filepath.Join(dir, manifestName), err)
	}
	if json.Unmarshal(b, &m) != nil {
		// A damaged record only costs backups: every differing file is then kept as one.
		return manifest{}, nil
	}
	return m, nil
}

// stillRegistered names the agents outside this run that read skills from root and still
// have luft registered (or whose config luft cannot read, to be safe).
func stillRegistered(o Options, targets []*agent, root string) string {
	var who []string
	for _, a := range agentsFor(o.Home, o.Getenv, o.Binary) {
		if a.skills != root || slices.ContainsFunc(targets, func(t *agent) bool { return t.name == a.name }) {
			continue
		}
		p := &configPlan{agent: a, path: a.config, real: a.config}
		if err := p.read(); err != nil {
			who = append(who, a.name)
			continue
		}
		if !p.exists {
			continue
		}
		if a.json != nil {
			if d, err := parseJSONDoc(p.old); err != nil || registeredJSON(d, *a.json) {
				who = append(who, a.name)
			}
		} else if registeredTOML(string(p.old), *a.toml) {
			who = append(who, a.name)
		}
	}
	return strings.Join(who, ", ")
}

// applySkill writes or removes the skill's files, backing up any file the user changed.
func applySkill(p *skillPlan, now time.Time) error {
	if p.keep != "" || len(p.write)+len(p.remove) == 0 {
		return nil
	}
	m, err := readManifest(p.dir)
	if err != nil {
		return err
	}
	ownedByLuft := func(n string, cur []byte) bool {
		return string(cur) == p.files[n] || m.Files[n] != "" && m.Files[n] == hashOf(cur)
	}
	for _, n := range p.write {
		if n == manifestName {
			continue
		}
		dst := filepath.Join(p.dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("create %s: %w", filepath.Dir(dst), err)
		}
		if cur, err := os.ReadFile(dst); err == nil && !ownedByLuft(n, cur) {
			if _, err := writeBackup(dst, cur, 0o644, now); err != nil {
				return err
			}
		}
		if err := writeAtomic(dst, []byte(p.files[n]), 0o644); err != nil {
			return err
		}
	}
	if len(p.write) > 0 {
		b, _ := json.MarshalIndent(manifest{Files: p.hashes()}, "", "  ")
		return writeAtomic(filepath.Join(p.dir, manifestName), append(b, '\n'), 0o644)
	}
	for _, n := range p.remove {
		dst := filepath.Join(p.dir, filepath.FromSlash(n))
		if cur, err := os.ReadFile(dst); err == nil && n != manifestName && !ownedByLuft(n, cur) {
			if _, err := writeBackup(dst, cur, 0o644, now); err != nil {
				return err
			}
		}
		if err := os.Remove(dst); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", dst, err)
		}
	}
	if err := os.Remove(filepath.Join(p.dir, manifestName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", filepath.Join(p.dir, manifestName), err)
	}
	// Folders left empty go too; one still holding a backup or the user's own file stays.
	dirs := map[string]bool{p.dir: true}
	for _, n := range p.remove {
		for d := path.Dir(n); d != "."; d = path.Dir(d) {
			dirs[filepath.Join(p.dir, filepath.FromSlash(d))] = true
		}
	}
	ordered := slices.SortedFunc(func(yield func(string) bool) {
		for d := range dirs {
			if !yield(d) {
				return
			}
		}
	}, func(a, b string) int { return len(b) - len(a) })
	for _, d := range ordered {
		if entries, err := os.ReadDir(d); err == nil && len(entries) == 0 {
			_ = os.Remove(d)
		}
	}
	return nil
}
