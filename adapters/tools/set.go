package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/luft-run/luft/adapters/tools/sandbox"
)

// Config is the [tools] table of luft.toml.
type Config struct {
	// Workspace is the directory the file tools are confined to and commands run in.
	// "" means the process's working directory; a relative path is taken from it.
	Workspace string
	// AllowCommands are the commands run_command may run, each given as words
	// ("go test", "ls"). An empty list allows none.
	AllowCommands []string
	// Approval is the policy for destructive tools; "" means ApprovalAsk.
	Approval Approval
	// Destructive names tools to treat as destructive even though their Spec does not
	// say so (write_file and edit_file are destructive already).
	Destructive []string
	// CommandTimeout bounds one run_command call; 0 means DefaultCommandTimeout.
	CommandTimeout time.Duration
	// Protected are files and folders write_file and edit_file may not change even inside
	// the workspace: luft's own config and state dir, whose change would change what
	// luft allows or replays.
	Protected []string
	// Env names the variables of luft's environment a command gets besides BaseEnv
	// ("GOPATH", or a prefix such as "GO*"); credentials are never passed otherwise.
	Env []string
	// Writable are folders commands may write besides the workspace and their private
	// temporary folder (a build cache, say). "~/" is the home folder; a relative path is
	// taken from the workspace. Each must exist.
	Writable []string
	// Readable are folders and files commands may read besides the workspace, the
	// system's folders, their program's folder and the tool caches ("~/" is the home
	// folder; a relative path is taken from the workspace). Naming one of Secrets, or a
	// path inside one, lets commands read it.
	Readable []string
	// Network are the TCP ports commands may connect to ("443"), or "all"; none by
	// default.
	Network []string
	// Unconfined lets commands run where the kernel cannot confine them (no Landlock, or
	// one too old to restrict the network); without it run_command is refused there.
	Unconfined bool
}

// DefaultCommandTimeout bounds a run_command call when Config.CommandTimeout is 0.
const DefaultCommandTimeout = 2 * time.Minute

// Output caps. They keep one tool result from flooding the model's context.
const (
	maxReadBytes    = 64 << 10 // read_file output
	maxListEntries  = 1000     // list_dir entries
	maxMatches      = 200      // search_files matches
	maxMatchLine    = 500      // bytes of one matching line shown
	maxSearchOutput = 64 << 10 // search_files output
	maxSearchFile   = 4 << 20  // files larger than this are not searched
	maxOutputBytes  = 64 << 10 // run_command output (head and tail)
	maxOutputStop   = 64 << 20 // run_command output past which the command is stopped
	binarySniff     = 8000     // bytes inspected for a NUL, as git does
)

// limits are the caps in force; tests lower them to exercise truncation cheaply.
type limits struct {
	readBytes    int
	listEntries  int
	matches      int
	matchLine    int
	searchOutput int
	searchFile   int64
	outputBytes  int
	outputStop   int64
}

func defaultLimits() limits {
	return limits{
		readBytes:    maxReadBytes,
		listEntries:  maxListEntries,
		matches:      maxMatches,
		matchLine:    maxMatchLine,
		searchOutput: maxSearchOutput,
		searchFile:   maxSearchFile,
		outputBytes:  maxOutputBytes,
		outputStop:   maxOutputStop,
	}
}

// env is what the built-in tools share: the workspace, the command policy and the caps.
type env struct {
	ws       workspace
	allow    [][]string // allow_commands, split into words
	timeout  time.Duration
	lim      limits
	envPass  []string // Config.Env
	writable []string // Config.Writable, absolute and resolved
	approval Approval // the policy: under ask, a command not allowed may run once approved
	conf     confinement
}

// Set is the registry of tools agents may be given. It is built once by New and
// read-only after, so it is safe for concurrent use.
type Set struct {
	env         *env
	tools       map[string]Tool
	origin      map[string]string // tool name → where it came from, for duplicate errors
	destructive map[string]bool   // names [tools] destructive lists
	approval    Approval
}

// toolName is what OpenAI-compatible endpoints accept as a function name.
var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// New builds the Set of built-in tools for cfg plus the extra tools given.
func New(cfg Config, extra ...Tool) (*Set, error) {
	ws, err := openWorkspace(cfg.Workspace)
	if err != nil {
		return nil, err
	}
	ws.guard = NewGuard(ws.dir, cfg.Protected)
	approval := cfg.Approval
	switch approval {
	case "":
		approval = ApprovalAsk
	case ApprovalAllow, ApprovalDeny, ApprovalAsk:
	default:
		return nil, fmt.Errorf("tools: approval %q is not a policy (use %q, %q or %q in [tools] approval)",
			approval, ApprovalAllow, ApprovalDeny, ApprovalAsk)
	}
	timeout := cfg.CommandTimeout
	switch {
	case timeout == 0:
		timeout = DefaultCommandTimeout
	case timeout < 0:
		return nil, fmt.Errorf("tools: command timeout %s is negative (use a positive duration, or 0 for the default %s)",
			timeout, DefaultCommandTimeout)
	}
	allow, err := ParseAllowList(cfg.AllowCommands)
	if err != nil {
		return nil, err
	}

	if err := CheckEnvNames("tools: env", cfg.Env); err != nil {
		return nil, err
	}
	writable, err := writableDirs(ws, cfg.Writable)
	if err != nil {
		return nil, err
	}
	if err := writableAroundProtected(cfg.Writable, writable, ws.real, ws.guard.protected); err != nil {
		return nil, err
	}

	conf, err := newConfinement(ws, cfg, ws.guard.protected)
	if err != nil {
		return nil, err
	}

	e := &env{ws: ws, allow: allow, timeout: timeout, lim: defaultLimits(), envPass: cfg.Env, writable: writable, approval: approval, conf: conf}
	s := &Set{
		env:         e,
		tools:       map[string]Tool{},
		origin:      map[string]string{},
		destructive: map[string]bool{},
		approval:    approval,
	}
	for _, t := range builtins(e) {
		s.tools[t.Spec().Name] = t
		s.origin[t.Spec().Name] = "the built-in " + t.Spec().Name
	}
	for i, t := range extra {
		if t == nil {
			return nil, fmt.Errorf("tools: extra tool %d is nil", i+1)
		}
		name := t.Spec().Name
		where := fmt.Sprintf("extra tool %d (%T)", i+1, t)
		if !toolName.MatchString(name) {
			return nil, fmt.Errorf("tools: %s has the name %q; tool names are 1 to 64 letters, digits, '_' or '-'", where, name)
		}
		if prev, ok := s.origin[name]; ok {
			return nil, fmt.Errorf("tools: two tools are named %q: %s and %s (rename one of them)", name, prev, where)
		}
		s.tools[name] = t
		s.origin[name] = where
	}
	for _, name := range cfg.Destructive {
		if _, ok := s.tools[name]; !ok {
			return nil, fmt.Errorf("tools: [tools] destructive names %q, which is not a tool (available: %s)",
				name, strings.Join(s.Names(), ", "))
		}
		s.destructive[name] = true
	}
	return s, nil
}

// writableDirs resolves [tools] writable: "~/" from the home folder, relative paths from
// the workspace; each must be an existing folder.
func writableDirs(ws workspace, dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		p := d
		if rest, ok := strings.CutPrefix(p, "~/"); ok || p == "~" {
			home, err := os.UserHomeDir()
			if err != nil {
				return nil, fmt.Errorf("tools: writable %q: no home folder to expand ~ in: %v", d, err)
			}
			p = filepath.Join(home, rest)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(ws.dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("tools: writable %q: %s is not an existing folder (create it, or remove it from [tools] writable)", d, p)
		}
		out = append(out, ResolveExisting(filepath.Clean(p)))
	}
	return out, nil
}

// writableAroundProtected refuses a [tools] writable folder that would undo confinement:
// one that holds the workspace (writable = ["/"], ["~"], [".."] let commands write
// anywhere around it) or a protected path outside it (luft's state dir or the active
// config kept elsewhere). The workspace itself is writable already. protected are the
// Guard's: absolute, links resolved.
func writableAroundProtected(names, dirs []string, ws string, protected []string) error {
	for i, d := range dirs {
		if d != ws && Within(d, ws) {
			return fmt.Errorf("tools: writable %q: %s holds the workspace %s, so commands could write anywhere around it: name a narrower folder in [tools] writable", names[i], d, ws)
		}
		for _, p := range protected {
			if !Within(ws, p) && Within(d, p) {
				return fmt.Errorf("tools: writable %q: %s holds %s, which commands must never change (luft's state or config): name a narrower folder in [tools] writable", names[i], d, p)
			}
		}
	}
	return nil
}

// sandboxCheck and sandboxStatus are sandbox's; tests replace them to see a kernel
// without Landlock.
var (
	sandboxCheck  = sandbox.Check
	sandboxStatus = sandbox.Status
)

// confineCheck reports why this Set's commands cannot run confined (nil: they can, or
// [tools] unconfined lets them run without).
func (e *env) confineCheck() error {
	p := e.policy("", e.ws.real, "")
	return sandboxCheck(p)
}

// Warnings are what a user should know about this Set before agents use it, when
// commands are allowed: that they will be refused, since the kernel cannot confine them
// (see package sandbox), or that they run unconfined, as [tools] unconfined asked.
func (s *Set) Warnings() []string {
	if len(s.env.allow) == 0 {
		return nil
	}
	p := s.env.policy("", s.env.ws.real, "")
	p.Unconfined = false
	err := sandboxCheck(p)
	switch {
	case err == nil:
		return nil
	case s.env.conf.unconfined:
		return []string{fmt.Sprintf("run_command: commands cannot be confined here (%v); [tools] unconfined = true lets them run anyway: "+
			"they can read and write whatever your user can (they still get a minimal environment without credentials, and no capabilities)",
			strings.TrimPrefix(err.Error(), sandbox.ErrCannotConfine.Error()+": "))}
	default:
		return []string{fmt.Sprintf("run_command: allowed commands will be refused: %v", err)}
	}
}

// Names returns the names of every tool in the set, sorted.
func (s *Set) Names() []string {
	return slices.Sorted(maps.Keys(s.tools))
}

// Workspace returns the absolute workspace directory.
func (s *Set) Workspace() string { return s.env.ws.dir }

// Resolve returns the tools named, in the order given (a repeated name once). Destructive
// tools come wrapped in the approval policy. An unknown name is an error that lists the
// available names.
func (s *Set) Resolve(names []string) ([]Tool, error) {
	var unknown []string
	out := make([]Tool, 0, len(names))
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		t, ok := s.tools[n]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		if t.Spec().Destructive || s.destructive[n] {
			t = &guarded{Tool: t, policy: s.approval}
		}
		out = append(out, t)
	}
	if len(unknown) > 0 {
		noun := "tool"
		if len(unknown) > 1 {
			noun = "tools"
		}
		return nil, fmt.Errorf("tools: unknown %s %s (available: %s)", noun, strings.Join(unknown, ", "), strings.Join(s.Names(), ", "))
	}
	return out, nil
}

// guarded is a destructive tool under the approval policy.
type guarded struct {
	Tool
	policy Approval
}

func (g *guarded) Spec() Spec {
	sp := g.Tool.Spec()
	sp.Destructive = true
	return sp
}

func (g *guarded) Call(ctx context.Context, args json.RawMessage) (string, error) {
	name := g.Tool.Spec().Name
	switch g.policy {
	case ApprovalAllow:
		return g.Tool.Call(ctx, args)
	case ApprovalDeny:
		return "", fmt.Errorf("%s: refused by policy: the tool is destructive and this run's [tools] approval is %q; "+
			"do the task without it, or say in your answer that it needs %s", name, ApprovalDeny, name)
	default:
		if isApproved(ctx) {
			return g.Tool.Call(ctx, args)
		}
		return "", &ApprovalError{Tool: name}
	}
}

// errMissing reports a required argument the model left out.
func errMissing(tool, arg string) error {
	return fmt.Errorf("%s: the %q argument is required", tool, arg)
}

// decodeArgs reads the model's JSON arguments into v, refusing unknown fields so a
// misspelt argument is reported rather than ignored.
func decodeArgs(tool string, raw json.RawMessage, v any, shape string) error {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: invalid arguments: %v (expected a JSON object %s)", tool, err, shape)
	}
	if dec.More() {
		return fmt.Errorf("%s: invalid arguments: extra data after the JSON object (expected a JSON object %s)", tool, shape)
	}
	return nil
}

// object is the JSON Schema of an arguments object.
func object(props map[string]any, required ...string) map[string]any {
	if required == nil {
		required = []string{}
	}
	return map[string]any{
		"type":                 "object",
		"properties":           props,
		"required":             required,
		"additionalProperties": false,
	}
}

func prop(typ, desc string) map[string]any {
	return map[string]any{"type": typ, "description": desc}
}

// openWorkspace resolves and checks the workspace directory.
func openWorkspace(dir string) (workspace, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return workspace{}, fmt.Errorf("tools: workspace: cannot find the working directory: %v (set [tools] workspace in luft.toml)", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return workspace{}, fmt.Errorf("tools: workspace %s: %v", dir, err)
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return workspace{}, fmt.Errorf("tools: workspace %s does not exist (create it, or set [tools] workspace in luft.toml to an existing directory)", abs)
	case err != nil:
		return workspace{}, fmt.Errorf("tools: workspace %s: %v", abs, err)
	case !fi.IsDir():
		return workspace{}, fmt.Errorf("tools: workspace %s is not a directory (set [tools] workspace in luft.toml to a directory)", abs)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return workspace{}, fmt.Errorf("tools: workspace %s cannot be opened: %v", abs, err)
	}
	root.Close()
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		real = abs
	}
	return workspace{dir: abs, real: real}, nil
}
