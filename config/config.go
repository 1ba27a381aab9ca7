// Package config loads luft's TOML configuration (SPEC §1, §6): ./luft.toml, then
// $XDG_CONFIG_HOME/luft/config.toml (or ~/.config/luft/config.toml), or the file named
// by --config. Every error names the file, the line and the key.
//
// The package only reads and validates; precedence against flags and env ("flags beat
// env beat config") is the caller's job. Relative paths in the file (tools.workspace,
// backends.*.mock_file) are returned as written.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"
)

// Config is a loaded configuration. The zero value is "no config file".
type Config struct {
	Path           string // the file it came from; "" when none
	DefaultBackend string
	// PlannerModel is the model that plans workflows from a task in words ("" = the
	// run's model); a "BACKEND/MODEL" value also picks the backend.
	PlannerModel string
	Backends     map[string]Backend
	Tools        Tools
	MCPServers   map[string]MCPServer
	Scheduler    Scheduler
	Proxy        Proxy
	Limits       Limits
	Storage      Storage
	Node         Node
	// Warnings are problems that do not stop luft (unknown keys), "FILE:LINE: KEY: MSG".
	Warnings []string
}

// Backend is one [backends.NAME] table.
type Backend struct {
	Type               string // "openai", "anthropic", "mock", "mockfile", "acp" (or "acp:AGENT")
	BaseURL            string // openai; "" = env OPENAI_BASE_URL
	Model              string
	APIKeyEnv          string // name of the env var holding the API key
	Command            string // acp: the agent command
	Args               []string
	MaxConcurrency     int // slots on this lane; 0 = unlimited
	TPM, RPM           int // 0 = learn from rate-limit headers
	Replicas           []string
	Fallback           string // backend id taking this lane's turns while its circuit is open
	PriceInputPerMTok  float64
	PriceOutputPerMTok float64
	MockFile           string        // mockfile: the JSON reply file
	MaxTurns           int           // openai: model turns of an agent's tool loop; 0 = the backend's default
	Stream             *bool         // openai: stream replies (default true)
	IdleTimeout        time.Duration // acp: no update from the agent for this long ends the call; 0 = default
	StructuredOutput   string        // openai: "auto" (default), "json_schema" or "instructions"
	Env                []string      // acp: names of luft's environment variables the agent also gets
}

// Tools is the [tools] table.
type Tools struct {
	Workspace      string
	AllowCommands  []string
	Approval       string        // destructive tools: "allow", "deny" or "ask" ("" = ask)
	Destructive    []string      // tool names treated as destructive besides those that say so
	CommandTimeout time.Duration // run_command; 0 = the tool's default
	Env            []string      // names of luft's environment variables commands also get
	Writable       []string      // folders commands may write besides the workspace
	Readable       []string      // folders and files commands may read besides the defaults
	Network        []string      // TCP ports commands may connect to ("443"), or "all"; none by default
	Unconfined     bool          // run commands even where the kernel cannot confine them
}

// StructuredOutputs are the valid values of a backend's structured_output.
var StructuredOutputs = []string{"auto", "json_schema", "instructions"}

// Approvals are the valid values of [tools] approval.
var Approvals = []string{"allow", "deny", "ask"}

// MCPServer is one [mcp_servers.NAME] table: a stdio command or an HTTP URL.
type MCPServer struct {
	Command string
	Args    []string
	URL     string
	Env     map[string]string
	PassEnv []string // names of luft's environment variables the server also gets
}

// Limits is the [limits] table: caps on what a run's script writes (SPEC §3). Zero fields
// take luft's defaults.
type Limits struct {
	MaxLogBytes    int   // one log()/print() message
	MaxReportBytes int   // the report as JSON
	MaxEventBytes  int   // one event's payload as JSON
	MaxEvents      int   // events per attempt of a run
	MaxEventsBytes int64 // payload bytes of the events of one attempt
}

// Scheduler is the [scheduler] table.
type Scheduler struct {
	SuspendAfter time.Duration // 0 = scheduler default
	Slots        int           // slots of a lane with no backend entry; 0 = unlimited
}

// Proxy is the [proxy] table: the OpenAI-compatible door (luft proxy serve, the daemon's
// /v1). Zero fields take the proxy's defaults.
type Proxy struct {
	IdleTimeout time.Duration // a run with no turn for this long ends
	MaxBody     int64         // largest request body, in bytes
}

// Storage is the [storage] table: where runs, events, the journal, approvals and tool
// calls are kept (SPEC §9).
type Storage struct {
	// URL is a PostgreSQL database (postgres://... or postgresql://...) shared by several
	// luft processes; "" keeps them in SQLite in the state dir. LUFT_STORAGE_URL, when set,
	// wins over it (the caller applies that).
	URL string
}

// Node is the [node] table: how a daemon holds its runs as a node of a shared store
// (SPEC §9). Zero fields take the defaults (a 10 s lease renewed every second).
type Node struct {
	Lease     time.Duration // how long a node's hold on its runs lasts without a renewal
	Heartbeat time.Duration // how often the node renews it (at most a third of Lease)
	// Workspaces are the names of the checkout this node's tools and coding agents work
	// in ([tools] workspace): a run that uses them records the first, and the node takes
	// over a run that recorded any of them. None: such a run needs this very node.
	Workspaces []string
}

// workspaceNameRE is a workspace name: letters, digits and . _ - /, as a repository's
// name is written ("repo", "acme/api"); no ':' (luft's own names of a node's workspace,
// "node:ID", have one) and no space.
var workspaceNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$`)

// CheckWorkspaces reports whether v, the decoded value of [node] workspaces, is a list of
// distinct workspace names, and returns them.
func CheckWorkspaces(v any) ([]string, error) {
	const fix = `write workspaces = ["repo"]: the names of the checkout [tools] workspace points at, the same on every machine that has it`
	switch x := v.(type) {
	case nil:
		return nil, nil
	case string:
		return nil, fmt.Errorf("is the string %q, not a list; %s", x, fix)
	case map[string]any:
		return nil, fmt.Errorf("is a table, not a list; the folder is [tools] workspace, and this key only names it: %s", fix)
	case []any:
		var out []string
		for i, e := range x {
			n, ok := e.(string)
			switch {
			case !ok:
				return nil, fmt.Errorf("entry %d is %v, not a name in quotes; %s", i+1, e, fix)
			case !workspaceNameRE.MatchString(n):
				return nil, fmt.Errorf("entry %d, %q, is not a workspace name (letters, digits, '.', '_', '-' and '/', starting with a letter or digit, at most 128): %s", i+1, n, fix)
			case slices.Contains(out, n):
				return nil, fmt.Errorf("entry %d, %q, is listed twice; name each workspace once", i+1, n)
			}
			out = append(out, n)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is %v, not a list of names; %s", v, fix)
}

// CheckStorageURL reports whether u can be a [storage] url: "" or a postgres:// or
// postgresql:// URL. The message never repeats the URL, which may hold a password.
func CheckStorageURL(u string) error {
	if u == "" {
		return nil
	}
	scheme, rest, ok := strings.Cut(u, "://")
	switch {
	case !ok:
		return errors.New("not a URL; write postgres://user@host:5432/dbname, or leave it out to keep runs in SQLite in the state dir")
	case scheme != "postgres" && scheme != "postgresql":
		return fmt.Errorf("unknown scheme %q; luft keeps runs in PostgreSQL (postgres://user@host:5432/dbname) or, with no url, in SQLite in the state dir", printable(scheme))
	case strings.ContainsAny(rest, " \t\r\n") || strings.ContainsFunc(rest, unicode.IsControl):
		return errors.New("the URL holds a space or a control character; percent-encode it (a space is %20)")
	}
	if _, err := url.Parse(u); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL
		}
		return fmt.Errorf("not a valid URL (%v); write postgres://user:password@host:5432/dbname, percent-encoding special characters of the password", err)
	}
	return nil
}

// MaxProxyBody bounds [proxy] max_body (and --max-body).
const MaxProxyBody = 1 << 30

// Lane returns the scheduler settings of one backend. A backend that is not configured
// gets [scheduler] slots and nothing else.
func (c Config) Lane(backendID string) (slots, tpm, rpm int, replicas []string, fallback string) {
	b, ok := c.Backends[backendID]
	if !ok {
		return c.Scheduler.Slots, 0, 0, nil, ""
	}
	return b.MaxConcurrency, b.TPM, b.RPM, b.Replicas, b.Fallback
}

// Error is an invalid configuration. Error() is "FILE:LINE: KEY: MSG" (the line and the
// key are left out when unknown).
type Error struct {
	File string
	Line int
	Key  string
	Msg  string
	err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		b.WriteString(": " + e.Key)
	}
	b.WriteString(": " + e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.err }

// Types are the valid backend types ("acp:AGENT" is accepted too).
// An anthropic backend serves the proxy's Anthropic Messages door only.
var Types = []string{"openai", "anthropic", "mock", "mockfile", "acp"}

// Load finds and parses the configuration. explicit is the --config flag: that file and
// no other (missing is an error). Otherwise ./luft.toml, then
// $XDG_CONFIG_HOME/luft/config.toml (XDG_CONFIG_HOME read through getenv) or
// home/.config/luft/config.toml; none of them is an empty Config and no error.
func Load(explicit string, getenv func(string) string, home string) (Config, error) {
	if explicit != "" {
		return loadFile(explicit)
	}
	cands := []string{"luft.toml"}
	xdg := ""
	if getenv != nil {
		xdg = getenv("XDG_CONFIG_HOME")
	}
	switch {
	case xdg != "":
		cands = append(cands, filepath.Join(xdg, "luft", "config.toml"))
	case home != "":
		cands = append(cands, filepath.Join(home, ".config", "luft", "config.toml"))
	}
	for _, p := range cands {
		if _, err := os.Stat(p); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return Config{}, &Error{File: p, Msg: err.Error(), err: err}
		}
		return loadFile(p)
	}
	return Config{}, nil
}

func loadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = pe.Err.Error()
		}
		return Config{}, &Error{File: path, Msg: msg, err: err}
	}
	return Parse(path, data)
}

// The TOML shapes; tags are the keys of SPEC §6.
type rawConfig struct {
	DefaultBackend string                `toml:"default_backend"`
	PlannerModel   string                `toml:"planner_model"`
	Backends       map[string]rawBackend `toml:"backends"`
	Tools          rawTools              `toml:"tools"`
	MCPServers     map[string]rawMCP     `toml:"mcp_servers"`
	Scheduler      rawScheduler          `toml:"scheduler"`
	Limits         rawLimits             `toml:"limits"`
	Proxy          rawProxy              `toml:"proxy"`
	Storage        rawStorage            `toml:"storage"`
	Node           rawNode               `toml:"node"`
}

type rawNode struct {
	Lease      string `toml:"lease"`
	Heartbeat  string `toml:"heartbeat"`
	Workspaces any    `toml:"workspaces"`
}

type rawStorage struct {
	URL string `toml:"url"`
}

type rawProxy struct {
	IdleTimeout string `toml:"idle_timeout"`
	MaxBody     int64  `toml:"max_body"`
}

type rawLimits struct {
	MaxLogBytes    int64 `toml:"max_log_bytes"`
	MaxReportBytes int64 `toml:"max_report_bytes"`
	MaxEventBytes  int64 `toml:"max_event_bytes"`
	MaxEvents      int64 `toml:"max_events"`
	MaxEventsBytes int64 `toml:"max_events_bytes"`
}

type rawBackend struct {
	Type               string   `toml:"type"`
	BaseURL            string   `toml:"base_url"`
	Model              string   `toml:"model"`
	APIKeyEnv          string   `toml:"api_key_env"`
	Command            string   `toml:"command"`
	Args               []string `toml:"args"`
	MaxConcurrency     int      `toml:"max_concurrency"`
	TPM                int      `toml:"tpm"`
	RPM                int      `toml:"rpm"`
	Replicas           []string `toml:"replicas"`
	Fallback           string   `toml:"fallback"`
	PriceInputPerMTok  float64  `toml:"price_input_per_mtok"`
	PriceOutputPerMTok float64  `toml:"price_output_per_mtok"`
	MockFile           string   `toml:"mock_file"`
	MaxTurns           int      `toml:"max_turns"`
	Stream             *bool    `toml:"stream"`
	IdleTimeout        string   `toml:"idle_timeout"`
	StructuredOutput   string   `toml:"structured_output"`
	Env                []string `toml:"env"`
}

type rawTools struct {
	Workspace      string   `toml:"workspace"`
	AllowCommands  []string `toml:"allow_commands"`
	Approval       string   `toml:"approval"`
	Destructive    []string `toml:"destructive"`
	CommandTimeout string   `toml:"command_timeout"`
	Env            []string `toml:"env"`
	Writable       []string `toml:"writable"`
	Readable       []string `toml:"readable"`
	Network        []any    `toml:"network"`
	Unconfined     bool     `toml:"unconfined"`
}

type rawMCP struct {
	Command string            `toml:"command"`
	Args    []string          `toml:"args"`
	URL     string            `toml:"url"`
	Env     map[string]string `toml:"env"`
	PassEnv []string          `toml:"pass_env"`
}

type rawScheduler struct {
	SuspendAfter string `toml:"suspend_after"`
	Slots        int    `toml:"slots"`
}

// typeErrRE reads a decoding error; the decoder leaves the line out of some of them.
var typeErrRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key ("(?:[^"\\]|\\.)*")\): (.*)$`)

// Parse parses and validates one file's contents; path names the file in errors and
// becomes Config.Path.
func Parse(path string, data []byte) (Config, error) {
	src := string(data)
	var raw rawConfig
	md, err := toml.Decode(src, &raw)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Config{}, &Error{File: path, Line: parseErrorLine(src, pe.Position), Key: pe.LastKey, Msg: printable(pe.Message), err: err}
		}
		if m := typeErrRE.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			key, _ := strconv.Unquote(m[2])
			if line == 0 {
				v := validator{lines: keyLines(src)}
				line = v.line(splitKey(key))
			}
			return Config{}, &Error{File: path, Line: line, Key: key, Msg: m[3], err: err}
		}
		return Config{}, &Error{File: path, Msg: strings.TrimPrefix(err.Error(), "toml: "), err: err}
	}
	v := validator{file: path, lines: keyLines(src)}

	// Unknown keys, in source order; an unknown table hides the keys inside it.
	var reported []toml.Key
	for _, k := range md.Undecoded() {
		if slices.ContainsFunc(reported, func(r toml.Key) bool { return hasPrefix(k, r) }) {
			continue
		}
		reported = append(reported, k)
		v.warnf(k, "unknown key, ignored (known: %s)", strings.Join(knownKeys(k), ", "))
	}

	c := Config{Path: path, DefaultBackend: raw.DefaultBackend, PlannerModel: raw.PlannerModel, Tools: Tools{
		Workspace: raw.Tools.Workspace, AllowCommands: raw.Tools.AllowCommands,
		Approval: raw.Tools.Approval, Destructive: raw.Tools.Destructive,
		Env: raw.Tools.Env, Writable: raw.Tools.Writable, Readable: raw.Tools.Readable, Unconfined: raw.Tools.Unconfined,
	}}
	for _, n := range raw.Tools.Network {
		port, err := networkEntry(n)
		if err != nil {
			v.errf(toml.Key{"tools", "network"}, "%v", err)
			continue
		}
		c.Tools.Network = append(c.Tools.Network, port)
	}
	if a := raw.Tools.Approval; a != "" && !slices.Contains(Approvals, a) {
		v.errf(toml.Key{"tools", "approval"}, "unknown policy %q (one of %s)", a, strings.Join(Approvals, ", "))
	}
	c.Tools.CommandTimeout = v.duration(toml.Key{"tools", "command_timeout"}, raw.Tools.CommandTimeout)
	if raw.DefaultBackend != "" {
		if _, ok := raw.Backends[raw.DefaultBackend]; !ok {
			v.errf(toml.Key{"default_backend"}, "backend %q is not defined%s", raw.DefaultBackend, defined(raw.Backends))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(raw.Backends)) {
		b := raw.Backends[id]
		k := func(name string) toml.Key { return toml.Key{"backends", id, name} }
		switch {
		case b.Type == "":
			v.errf(toml.Key{"backends", id}, "type is required (one of %s)", strings.Join(Types, ", "))
		case !slices.Contains(Types, b.Type) && !(strings.HasPrefix(b.Type, "acp:") && len(b.Type) > 4):
			v.errf(k("type"), "unknown backend type %q (one of %s)", b.Type, strings.Join(Types, ", "))
		}
		v.check(k("max_concurrency"), CheckRange(b.MaxConcurrency, 0, MaxSlots))
		v.check(k("tpm"), CheckRange(b.TPM, 0, MaxTPM))
		v.check(k("rpm"), CheckRange(b.RPM, 0, MaxRPM))
		v.check(k("max_turns"), CheckRange(b.MaxTurns, 0, MaxTurns))
		v.check(k("price_input_per_mtok"), CheckRange(b.PriceInputPerMTok, 0, MaxPricePerMTok))
		v.check(k("price_output_per_mtok"), CheckRange(b.PriceOutputPerMTok, 0, MaxPricePerMTok))
		if b.BaseURL != "" {
			v.check(k("base_url"), CheckURL(b.BaseURL))
		}
		for i, r := range b.Replicas {
			if err := CheckURL(r); err != nil {
				v.check(k("replicas"), fmt.Errorf("replica %d: %w", i+1, err))
			}
		}
		if b.Fallback != "" {
			if b.Fallback == id {
				v.errf(k("fallback"), "a backend cannot be its own fallback")
			} else if fb, ok := raw.Backends[b.Fallback]; !ok {
				v.errf(k("fallback"), "backend %q is not defined%s", b.Fallback, defined(raw.Backends))
			} else if fb.Type != b.Type {
				v.errf(k("fallback"), "backend %q is of type %q; a fallback takes over this backend's turns and must be of the same type (%q)", b.Fallback, fb.Type, b.Type)
			}
		}
		if c.Backends == nil {
			c.Backends = map[string]Backend{}
		}
		c.Backends[id] = Backend{
			Type: b.Type, BaseURL: b.BaseURL, Model: b.Model, APIKeyEnv: b.APIKeyEnv, Command: b.Command, Args: b.Args,
			MaxConcurrency: b.MaxConcurrency, TPM: b.TPM, RPM: b.RPM, Replicas: b.Replicas, Fallback: b.Fallback,
			PriceInputPerMTok: b.PriceInputPerMTok, PriceOutputPerMTok: b.PriceOutputPerMTok, MockFile: b.MockFile,
			MaxTurns: b.MaxTurns, Stream: b.Stream, IdleTimeout: v.duration(k("idle_timeout"), b.IdleTimeout),
			StructuredOutput: b.StructuredOutput, Env: b.Env,
		}
		if so := b.StructuredOutput; so != "" && !slices.Contains(StructuredOutputs, so) {
			v.errf(k("structured_output"), "unknown mode %q (one of %s)", so, strings.Join(StructuredOutputs, ", "))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(raw.MCPServers)) {
		s := raw.MCPServers[id]
		switch {
		case s.Command == "" && s.URL == "":
			v.errf(toml.Key{"mcp_servers", id}, "needs command or url")
		case s.Command != "" && s.URL != "":
			v.errf(toml.Key{"mcp_servers", id, "url"}, "set command (a stdio server) or url (streamable HTTP), not both")
		case s.URL != "" && (len(s.Args) > 0 || len(s.Env) > 0 || len(s.PassEnv) > 0):
			v.errf(toml.Key{"mcp_servers", id, "url"}, "args, env and pass_env start a command; a url server takes none of them")
		case s.URL != "":
			v.check(toml.Key{"mcp_servers", id, "url"}, CheckURL(s.URL))
		}
		if c.MCPServers == nil {
			c.MCPServers = map[string]MCPServer{}
		}
		c.MCPServers[id] = MCPServer(s)
	}
	v.envNames(toml.Key{"tools", "env"}, raw.Tools.Env)
	for _, id := range slices.Sorted(maps.Keys(raw.Backends)) {
		v.envNames(toml.Key{"backends", id, "env"}, raw.Backends[id].Env)
	}
	for _, id := range slices.Sorted(maps.Keys(raw.MCPServers)) {
		v.envNames(toml.Key{"mcp_servers", id, "pass_env"}, raw.MCPServers[id].PassEnv)
	}
	c.Scheduler.SuspendAfter = v.duration(toml.Key{"scheduler", "suspend_after"}, raw.Scheduler.SuspendAfter)
	v.check(toml.Key{"scheduler", "slots"}, CheckRange(raw.Scheduler.Slots, 0, MaxSlots))
	c.Scheduler.Slots = raw.Scheduler.Slots
	c.Limits = v.limits(raw.Limits)
	c.Proxy.IdleTimeout = v.duration(toml.Key{"proxy", "idle_timeout"}, raw.Proxy.IdleTimeout)
	v.check(toml.Key{"proxy", "max_body"}, CheckRange(raw.Proxy.MaxBody, 0, MaxProxyBody))
	c.Proxy.MaxBody = raw.Proxy.MaxBody
	v.check(toml.Key{"storage", "url"}, CheckStorageURL(raw.Storage.URL))
	c.Storage.URL = raw.Storage.URL
	c.Node.Lease = v.duration(toml.Key{"node", "lease"}, raw.Node.Lease)
	c.Node.Heartbeat = v.duration(toml.Key{"node", "heartbeat"}, raw.Node.Heartbeat)
	ws, err := CheckWorkspaces(raw.Node.Workspaces)
	v.check(toml.Key{"node", "workspaces"}, err)
	c.Node.Workspaces = ws
	if c.Node.Heartbeat > 0 && c.Node.Lease > 0 && 3*c.Node.Heartbeat > c.Node.Lease {
		v.check(toml.Key{"node", "heartbeat"}, fmt.Errorf("heartbeat %s is more than a third of the lease %s: renew at least three times per lease (raise lease or lower heartbeat)", c.Node.Heartbeat, c.Node.Lease))
	}
	if e := v.first(); e != nil {
		return Config{}, e
	}
	c.Warnings = v.warnings
	return c, nil
}

// parseErrorLine is the line of a syntax error, from 1. It is counted from the error's
// byte offset: the decoder's own line is one short for an error at the end of the file
// (`a = "\` is reported on line 0).
func parseErrorLine(src string, pos toml.Position) int {
	if pos.Start < 0 || pos.Start > len(src) {
		return max(pos.Line, 1)
	}
	return 1 + strings.Count(src[:pos.Start], "\n")
}

// printable replaces control characters in a decoder message (an escape cut by the end
// of the file is shown with a NUL) by Go escapes.
func printable(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func defined[V any](m map[string]V) string {
	if len(m) == 0 {
		return " (no backends are configured)"
	}
	return " (defined: " + strings.Join(slices.Sorted(maps.Keys(m)), ", ") + ")"
}

func hasPrefix(k, p toml.Key) bool {
	return len(k) >= len(p) && slices.Equal(k[:len(p)], p)
}

// knownKeys lists the keys valid beside the unknown key k.
func knownKeys(k toml.Key) []string {
	var t reflect.Type
	switch {
	case len(k) == 1:
		t = reflect.TypeFor[rawConfig]()
	case k[0] == "backends" && len(k) == 3:
		t = reflect.TypeFor[rawBackend]()
	case k[0] == "mcp_servers" && len(k) == 3:
		t = reflect.TypeFor[rawMCP]()
	case k[0] == "tools" && len(k) == 2:
		t = reflect.TypeFor[rawTools]()
	case k[0] == "scheduler" && len(k) == 2:
		t = reflect.TypeFor[rawScheduler]()
	case k[0] == "limits" && len(k) == 2:
		t = reflect.TypeFor[rawLimits]()
	case k[0] == "proxy" && len(k) == 2:
		t = reflect.TypeFor[rawProxy]()
	case k[0] == "storage" && len(k) == 2:
		t = reflect.TypeFor[rawStorage]()
	case k[0] == "node" && len(k) == 2:
		t = reflect.TypeFor[rawNode]()
	default:
		return []string{"none"}
	}
	var out []string
	for f := range t.Fields() {
		out = append(out, f.Tag.Get("toml"))
	}
	sort.Strings(out)
	return out
}

// validator collects errors and reports the one earliest in the file.
type validator struct {
	file     string
	lines    map[string]int
	errs     []*Error
	warnings []string
}

func (v *validator) warnf(k toml.Key, format string, args ...any) {
	e := &Error{File: v.file, Line: v.line(k), Key: k.String(), Msg: fmt.Sprintf(format, args...)}
	v.warnings = append(v.warnings, e.Error())
}

// duration parses the duration at k ("" is 0); a bad or negative one is an error.
func (v *validator) duration(k toml.Key, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		v.errf(k, "not a duration: %q (e.g. \"2m\", \"90s\")", s)
	case d < 0:
		v.errf(k, "must not be negative (got %s)", s)
	}
	return d
}

// envNameRE is an environment variable name, optionally ending in "*" (a prefix).
var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\*?$`)

// envNames checks a list of variable names given to child processes.
func (v *validator) envNames(k toml.Key, names []string) {
	for _, n := range names {
		if !envNameRE.MatchString(n) {
			v.errf(k, "%q is not an environment variable name (give names such as \"GOPATH\", or a prefix such as \"GO*\")", n)
		}
	}
}

// check records err, when not nil, as the error of k.
func (v *validator) check(k toml.Key, err error) {
	if err != nil {
		v.errf(k, "%v", err)
	}
}

func (v *validator) errf(k toml.Key, format string, args ...any) {
	v.errs = append(v.errs, &Error{File: v.file, Line: v.line(k), Key: k.String(), Msg: fmt.Sprintf(format, args...)})
}

// line finds the line of k, or of its closest enclosing table written in the file. The
// TOML decoder matches table and key names to fields case-insensitively ([BACKENDS.x]
// fills backends), so a key not written exactly as k is looked for that way too.
func (v *validator) line(k toml.Key) int {
	for n := len(k); n > 0; n-- {
		want := strings.Join(k[:n], "\x00")
		if l, ok := v.lines[want]; ok {
			return l
		}
		best := 0
		for written, l := range v.lines {
			if strings.EqualFold(written, want) && (best == 0 || l < best) {
				best = l
			}
		}
		if best > 0 {
			return best
		}
	}
	return 0
}

func (v *validator) first() error {
	if len(v.errs) == 0 {
		return nil
	}
	sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].Line < v.errs[j].Line })
	return v.errs[0]
}

// Bounds of the [limits] keys: a cap below the minimum leaves no room for the cut marker
// (or for a run's own events); one above the maximum would let a script fill a disk.
const (
	minLimitBytes  = 1 << 10
	maxLimitBytes  = 1 << 30
	minEvents      = 100
	maxEvents      = 1 << 31
	maxEventsBytes = 1 << 40
)

// limits checks the [limits] table; 0 (or no key) is luft's default.
func (v *validator) limits(raw rawLimits) Limits {
	check := func(name string, n, lo, hi int64, unit string) int64 {
		if n != 0 && (n < lo || n > hi) {
			v.errf(toml.Key{"limits", name}, "must be 0 (the default) or between %d and %d %s (got %d)", lo, hi, unit, n)
			return 0
		}
		return n
	}
	return Limits{
		MaxLogBytes:    int(check("max_log_bytes", raw.MaxLogBytes, minLimitBytes, maxLimitBytes, "bytes")),
		MaxReportBytes: int(check("max_report_bytes", raw.MaxReportBytes, minLimitBytes, maxLimitBytes, "bytes")),
		MaxEventBytes:  int(check("max_event_bytes", raw.MaxEventBytes, minLimitBytes, maxLimitBytes, "bytes")),
		MaxEvents:      int(check("max_events", raw.MaxEvents, minEvents, maxEvents, "events")),
		MaxEventsBytes: check("max_events_bytes", raw.MaxEventsBytes, minLimitBytes, maxEventsBytes, "bytes"),
	}
}

// networkEntry reads one [tools] network entry: a TCP port (443 or "443") or "all".
func networkEntry(v any) (string, error) {
	bad := fmt.Errorf("%v is not a TCP port (give port numbers such as 443, or \"all\" to let commands connect anywhere)", v)
	switch x := v.(type) {
	case int64:
		if x < 1 || x > 65535 {
			return "", bad
		}
		return strconv.FormatInt(x, 10), nil
	case string:
		if x == "all" || x == "*" {
			return "all", nil
		}
		n, err := strconv.ParseUint(x, 10, 16)
		if err != nil || n == 0 {
			return "", fmt.Errorf("%q is not a TCP port (give port numbers such as 443, or \"all\" to let commands connect anywhere)", x)
		}
		return x, nil
	}
	return "", bad
}
