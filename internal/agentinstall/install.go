package agentinstall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/diff"
)

// maxConfigSize bounds a config file luft reads. Claude Code's ~/.claude.json grows with
// its project history; a few MiB is usual, 64 MiB is not a config.
const maxConfigSize = 64 << 20

// ErrUnknownAgent is an --agent name luft does not know: a mistake in the command line.
var ErrUnknownAgent = errors.New("unknown agent")

// Options says what Run does.
type Options struct {
	// Home is the user's home folder ($HOME); it must be absolute.
	Home string
	// Getenv reads PATH, XDG_CONFIG_HOME, CLAUDE_CONFIG_DIR and CODEX_HOME.
	Getenv func(string) string
	// Binary is the absolute path of the luft executable the agents start.
	Binary string
	// Agents are the agents named with --agent; empty or "all" means every detected one.
	Agents []string
	// DryRun prints what would change and writes nothing.
	DryRun bool
	// Uninstall removes what an install adds.
	Uninstall bool
	// Now stamps backup names.
	Now func() time.Time
	// Out receives the report: one line per change, diffs on a dry run.
	Out io.Writer
}

// configPlan is the edit of one agent's config file.
type configPlan struct {
	agent   *agent
	path    string // as the agent reads it
	real    string // the file written: path with symlinks resolved
	old     []byte // nil when the file does not exist
	exists  bool
	mode    fs.FileMode
	new     []byte
	changed bool
}

// skillPlan is the skill in one skills folder, shared by the agents that read it.
type skillPlan struct {
	agents []string
	dir    string // <skills>/luft-workflows
	write  []string
	remove []string
	keep   string // why an uninstall leaves the skill in place
	files  map[string]string
}

// Run registers luft with the chosen agents (or removes it with Uninstall). It reads and
// checks everything before it writes anything: a config it cannot edit safely stops the
// whole run with nothing changed.
func Run(ctx context.Context, o Options) error {
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Home == "" {
		return errors.New("install: HOME is not set; luft needs it to find the agents' configs (set HOME to your home folder)")
	}
	if !filepath.IsAbs(o.Home) {
		return fmt.Errorf("install: HOME is %q, not an absolute path; set HOME to your home folder", o.Home)
	}
	if !filepath.IsAbs(o.Binary) {
		return fmt.Errorf("install: the luft executable's path %q is not absolute (give --binary an absolute path)", o.Binary)
	}
	targets, notes, err := pickAgents(o)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(o.Out, n)
	}
	var plans []*configPlan
	var problems []error
	for _, a := range targets {
		p, err := planConfig(a, o.Uninstall)
		if err != nil {
			problems = append(problems, fmt.Errorf("%s: %w", a.name, err))
			continue
		}
		plans = append(plans, p)
	}
	skillsPlans, err := planSkills(o, targets)
	if err != nil {
		problems = append(problems, err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("install: nothing was changed:\n  %w", lineErrors(problems))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if o.DryRun {
		report(o, plans, skillsPlans, nil)
		fmt.Fprintln(o.Out, "dry run: nothing was written")
		return nil
	}
	backups := map[string]string{}
	for i, p := range plans {
		if !p.changed {
			continue
		}
		b, err := applyConfig(p, o.Now())
		if err != nil {
			report(o, plans[:i], nil, backups)
			return fmt.Errorf("install: %s: %w", p.agent.name, err)
		}
		backups[p.path] = b
	}
	for i, s := range skillsPlans {
		if err := applySkill(s, o.Now()); err != nil {
			report(o, plans, skillsPlans[:i], backups)
			return fmt.Errorf("install: %s: %w", strings.Join(s.agents, ", "), err)
		}
	}
	report(o, plans, skillsPlans, backups)
	return nil
}

// lineErrors are the problems that stop a run, one a line; errors.Is and errors.As see
// each of them.
type lineErrors []error

func (l lineErrors) Unwrap() []error { return l }

func (l lineErrors) Error() string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n  ")
}

// pickAgents resolves --agent to agents, with notes for named agents that look absent.
func pickAgents(o Options) ([]*agent, []string, error) {
	all := agentsFor(o.Home, o.Getenv, o.Binary)
	named := map[string]bool{}
	for _, n := range o.Agents {
		for _, part := range strings.Split(n, ",") {
			part = strings.ToLower(strings.TrimSpace(part))
			if part == "" {
				continue
			}
			if part != "all" && !slices.Contains(Agents, part) {
				return nil, nil, fmt.Errorf("install: %w %q (choose from %s, or all)", ErrUnknownAgent, part, strings.Join(Agents, ", "))
			}
			named[part] = true
		}
	}
	var out []*agent
	var notes []string
	if len(named) == 0 || named["all"] {
		for _, a := range all {
			if a.detected(o.Getenv) != "" {
				out = append(out, a)
			}
		}
		if len(out) == 0 && !o.Uninstall {
			return nil, nil, fmt.Errorf("install: no coding agent found (looked for %s on PATH and their config folders under %s); name one with --agent", strings.Join(Agents, ", "), o.Home)
		}
		if len(out) == 0 {
			notes = append(notes, "no coding agent found; nothing to remove")
		}
		return out, notes, nil
	}
	for _, a := range all {
		if !named[a.name] {
			continue
		}
		if a.detected(o.Getenv) == "" && !o.Uninstall {
			notes = append(notes, fmt.Sprintf("%s: not detected (%s); configuring it anyway", a.name, a.notFoundWhere()))
		}
		out = append(out, a)
	}
	return out, notes, nil
}

// planConfig reads an agent's config and computes its new content.
func planConfig(a *agent, uninstall bool) (*configPlan, error) {
	p := &configPlan{agent: a, path: a.config, real: a.config, mode: 0o600}
	if err := p.read(); err != nil {
		return nil, err
	}
	var err error
	switch {
	case a.json != nil:
		err = p.planJSON(uninstall)
	default:
		err = p.planTOML(uninstall)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w — fix the file, or edit it by hand: %s", p.path, err, p.snippet(uninstall))
	}
	if p.changed && p.exists && p.mode.Perm()&0o200 == 0 {
		return nil, fmt.Errorf("%s is read-only; make it writable (chmod u+w %s) and run luft install again, or edit it by hand: %s", p.real, p.real, p.snippet(uninstall))
	}
	// The new file replaces the old through a rename in its folder, so the folder must
	// take a new file.
	if dir := filepath.Dir(p.real); p.changed {
		if st, err := os.Stat(dir); err == nil && st.Mode().Perm()&0o200 == 0 {
			return nil, fmt.Errorf("the folder %s is read-only; make it writable (chmod u+w %s) and run luft install again, or edit %s by hand: %s", dir, dir, p.real, p.snippet(uninstall))
		}
	}
	return p, nil
}

func (p *configPlan) snippet(uninstall bool) string {
	switch {
	case uninstall && p.agent.json != nil:
		return fmt.Sprintf("remove %q from %q", "luft", p.agent.json.container)
	case uninstall:
		return "remove the " + p.agent.toml.header() + " table"
	case p.agent.json != nil:
		return p.agent.json.snippet()
	}
	return strings.TrimSpace(p.agent.toml.snippet())
}

// read loads the config, following a symlink to the file it names.
func (p *configPlan) read() error {
	st, err := os.Lstat(p.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p.path, err)
	}
	if st.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(p.path)
		if err != nil {
			return fmt.Errorf("%s is a symlink luft cannot follow (%v); point it at a file or remove it", p.path, err)
		}
		p.real = real
		if st, err = os.Stat(real); err != nil {
			return fmt.Errorf("read %s: %w", real, err)
		}
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%s); luft edits only files", p.real, st.Mode().Type())
	}
	if st.Size() > maxConfigSize {
		return fmt.Errorf("%s is %d bytes, over the %d MiB luft reads for a config", p.real, st.Size(), maxConfigSize>>20)
	}
	b, err := readCapped(p.real)
	if err != nil {
		return err
	}
	p.old, p.exists, p.mode = b, true, st.Mode()
	return nil
}

// readCapped reads a file of at most maxConfigSize bytes (it may grow after the stat).
func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxConfigSize {
		return nil, fmt.Errorf("%s is over the %d MiB luft reads for a config", path, maxConfigSize>>20)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

func (p *configPlan) planJSON(uninstall bool) error {
	d, err := parseJSONDoc(p.old)
	if err != nil {
		return fmt.Errorf("not valid JSON (%w)", err)
	}
	if uninstall {
		p.changed, err = uninstallJSON(d, *p.agent.json)
	} else {
		p.changed, err = installJSON(d, *p.agent.json)
	}
	if err != nil {
		return err
	}
	p.new = p.old
	if p.changed {
		p.new = d.encode()
	}
	return nil
}

func (p *configPlan) planTOML(uninstall bool) error {
	var out string
	var err error
	if uninstall {
		out, p.changed, err = uninstallTOML(string(p.old), *p.agent.toml)
	} else {
		out, p.changed, err = installTOML(string(p.old), *p.agent.toml)
	}
	if err != nil {
		return fmt.Errorf("TOML: %w", err)
	}
	p.new = []byte(out)
	return nil
}

// applyConfig backs the file up and writes its new content in its place. It returns the
// backup's path ("" for a file luft created).
func applyConfig(p *configPlan, now time.Time) (string, error) {
	backup := ""
	if p.exists {
		cur, err := readCapped(p.real)
		if err != nil {
			return "", err
		}
		if !bytes.Equal(cur, p.old) {
			return "", fmt.Errorf("%s changed while luft install ran (another program wrote it); run luft install again", p.real)
		}
		if backup, err = writeBackup(p.real, p.old, p.mode, now); err != nil {
			return "", err
		}
	} else if err := os.MkdirAll(filepath.Dir(p.real), 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", filepath.Dir(p.real), err)
	}
	return backup, writeAtomic(p.real, p.new, p.mode.Perm())
}

// writeBackup copies a file's old content beside it under a name no file has yet.
func writeBackup(path string, content []byte, mode fs.FileMode, now time.Time) (string, error) {
	base := path + ".luft-backup-" + now.UTC().Format("20060102T150405Z")
	for n := 1; n < 1000; n++ {
		name := base
		if n > 1 {
			name = fmt.Sprintf("%s-%d", base, n)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("back up %s: %w (nothing was changed in it)", path, err)
		}
		_, err = f.Write(content)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(name)
			return "", fmt.Errorf("back up %s: %w (nothing was changed in it)", path, err)
		}
		return name, nil
	}
	return "", fmt.Errorf("back up %s: 999 backups already exist for this second; remove some", path)
}

// writeAtomic replaces path with content through a temporary file in its folder, so a
// crash leaves the old file or the new one, never half of one.
func writeAtomic(path string, content []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".luft-tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// report prints what was (or, on a dry run, would be) changed.
func report(o Options, plans []*configPlan, sk []*skillPlan, backups map[string]string) {
	changed := 0
	for _, p := range plans {
		name := p.agent.name
		where := p.path
		if p.real != p.path {
			where = fmt.Sprintf("%s (a symlink to %s)", p.path, p.real)
		}
		switch {
		case !p.changed && o.Uninstall:
			fmt.Fprintf(o.Out, "%s: %s: luft is not registered; unchanged\n", name, where)
		case !p.changed:
			fmt.Fprintf(o.Out, "%s: %s: luft already registered; unchanged\n", name, where)
		case o.DryRun:
			changed++
			verb := "would register luft in"
			if o.Uninstall {
				verb = "would remove luft from"
			}
			fmt.Fprintf(o.Out, "%s: %s %s:\n", name, verb, where)
			o.Out.Write(diff.Diff(p.real, p.old, p.real+" (new)", p.new))
		default:
			changed++
			verb := "registered luft (" + o.Binary + " mcp serve) in"
			if o.Uninstall {
				verb = "removed luft from"
			}
			line := fmt.Sprintf("%s: %s %s", name, verb, where)
			if b := backups[p.path]; b != "" {
				line += "; backup: " + b
			} else if !p.exists {
				line += " (new file)"
			}
			fmt.Fprintln(o.Out, line)
		}
	}
	for _, s := range sk {
		name := strings.Join(s.agents, ", ")
		would := ""
		if o.DryRun {
			would = "would be "
		}
		switch {
		case s.keep != "":
			fmt.Fprintf(o.Out, "%s: skill kept in %s (%s)\n", name, s.dir, s.keep)
		case len(s.write) > 0:
			changed++
			fmt.Fprintf(o.Out, "%s: skill %swritten to %s (%s)\n", name, would, s.dir, strings.Join(s.write, ", "))
		case len(s.remove) > 0:
			changed++
			fmt.Fprintf(o.Out, "%s: skill %sremoved from %s (%s)\n", name, would, s.dir, strings.Join(s.remove, ", "))
		case o.Uninstall:
			fmt.Fprintf(o.Out, "%s: no skill in %s; unchanged\n", name, s.dir)
		default:
			fmt.Fprintf(o.Out, "%s: skill in %s is up to date; unchanged\n", name, s.dir)
		}
	}
	if changed == 0 && !o.DryRun && (len(plans) > 0 || len(sk) > 0) {
		fmt.Fprintln(o.Out, "nothing to change")
	}
}
