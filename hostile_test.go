package luft_test

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/luft-run/luft"
	"github.com/luft-run/luft/config"
)

var echo = luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
	return luft.Response{Text: req.Prompt}, nil
})

// New refuses bad options with an error naming the option and what to do; nothing panics.
func TestNewRefusesBadOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	badConfig := filepath.Join(t.TempDir(), "luft.toml")
	if err := os.WriteFile(badConfig, []byte("[backends.x]\ntype = \"nonsense\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config.Config{}
	noEnv := func(string) string { return "" }
	dir := func() string { return t.TempDir() }
	for _, tc := range []struct {
		name string
		opts luft.Options
		more []luft.Option
		want string
	}{
		{"zero options", luft.Options{}, nil, "Options.StateDir is empty"},
		{"nil option", luft.Options{StateDir: dir()}, []luft.Option{nil}, "option 1 is nil"},
		{"state dir under a file", luft.Options{StateDir: filepath.Join(file, "state")}, nil, "create state dir"},
		{"both configs", luft.Options{StateDir: dir(), ConfigPath: badConfig, Config: &cfg}, nil, "give one"},
		{"missing config", luft.Options{StateDir: dir(), ConfigPath: filepath.Join(dir(), "none.toml")}, nil, "none.toml"},
		{"invalid config", luft.Options{StateDir: dir(), ConfigPath: badConfig}, nil, "nonsense"},
		{"unknown backend", luft.Options{StateDir: dir(), Backend: "nope"}, nil, `Options.Backend: backend: "nope" is not registered`},
		{"concurrency", luft.Options{StateDir: dir(), Concurrency: -1}, nil, "Options.Concurrency -1"},
		{"concurrency huge", luft.Options{StateDir: dir(), Concurrency: config.MaxSlots + 1}, nil, "out of range"},
		{"event buffer", luft.Options{StateDir: dir(), EventBuffer: -5}, nil, "Options.EventBuffer"},
		{"empty backend name", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend("", echo)}, "the name is empty"},
		{"slash in name", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend("a/b", echo)}, "slash"},
		{"long name", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend(strings.Repeat("x", 1<<20), echo)}, "longer than 64"},
		{"nil backend", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend("b", nil)}, "the backend is nil"},
		{"twice", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend("b", echo), luft.WithBackend("b", echo)}, "registered twice"},
		{"built-in name", luft.Options{StateDir: dir()}, []luft.Option{luft.WithBackend("mock", echo)}, "already has this name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.opts.Getenv == nil {
				tc.opts.Getenv = noEnv
			}
			eng, err := luft.New(tc.opts, tc.more...)
			if err == nil {
				eng.Close()
				t.Fatal("New accepted it")
			}
			if !strings.Contains(err.Error(), tc.want) || len(err.Error()) > 2000 {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

// A state dir this process may not write is refused with the path and the fix. As root
// every mode bit is ignored, so /proc (which nobody may create folders in) stands in.
func TestNewUnwritableStateDir(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "state")
	if os.Geteuid() == 0 {
		if goruntime.GOOS != "linux" {
			t.Skip("as root, mode bits do not stop writes; /proc stands in on Linux only")
		}
		dir = "/proc/luft-state"
	} else if err := os.Chmod(parent, 0o500); err != nil {
		t.Fatal(err)
	}
	_, err := luft.New(luft.Options{StateDir: dir, Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "Options.StateDir") {
		t.Fatalf("New over an unwritable state dir: %v", err)
	}
	// The state dir is free again: nothing half-opened holds it.
	if os.Geteuid() != 0 {
		os.Chmod(parent, 0o700)
		eng, err := luft.New(luft.Options{StateDir: dir, Getenv: func(string) string { return "" }})
		if err != nil {
			t.Fatal(err)
		}
		eng.Close()
	}
}

// One Engine per state dir in a process; after Close another may open it, and the closed
// one refuses work with ErrClosed.
func TestOneEnginePerStateDir(t *testing.T) {
	dir := t.TempDir()
	eng := newEngine(t, luft.Options{StateDir: dir})
	if _, err := luft.New(luft.Options{StateDir: dir + "/."}); err == nil || !strings.Contains(err.Error(), "already open") {
		t.Fatalf("a second Engine on one state dir: %v", err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := eng.Run(t.Context(), luft.Script{Source: "function main() end"}); !errors.Is(err, luft.ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	if _, err := eng.List(t.Context(), luft.ListOptions{}); !errors.Is(err, luft.ErrClosed) {
		t.Fatalf("List after Close: %v", err)
	}
	again := newEngine(t, luft.Options{StateDir: dir})
	if _, err := again.Run(t.Context(), luft.Script{Source: "function main() end"}); err != nil {
		t.Fatal(err)
	}
}

// A nil *Engine returns an error from every method instead of panicking.
func TestNilEngine(t *testing.T) {
	var eng *luft.Engine
	ctx := context.Background()
	if _, err := eng.Run(ctx, luft.Script{Source: "function main() end"}); err == nil {
		t.Error("Run")
	}
	if _, err := eng.Resume(ctx, "x"); err == nil {
		t.Error("Resume")
	}
	if _, err := eng.Status(ctx, "x"); err == nil {
		t.Error("Status")
	}
	if _, err := eng.List(ctx, luft.ListOptions{}); err == nil {
		t.Error("List")
	}
	if err := eng.Cancel(ctx, "x"); err == nil {
		t.Error("Cancel")
	}
	for _, err := range eng.Events(ctx, "x", 0) {
		if err == nil {
			t.Error("Events")
		}
	}
	if err := eng.Close(); err != nil {
		t.Error("Close")
	}
	if eng.Backends() != nil || eng.Warnings() != nil || eng.StateDir() != "" {
		t.Error("the accessors of a nil Engine return something")
	}
}

// Bad scripts and arguments are refused before anything is recorded, naming the field.
func TestStartRefusesBadScripts(t *testing.T) {
	eng := newEngine(t, luft.Options{})
	deep := any(map[string]any{})
	for range 200 {
		deep = map[string]any{"a": deep}
	}
	for _, tc := range []struct {
		name string
		s    luft.Script
		want string
	}{
		{"empty", luft.Script{}, "neither Source nor Path"},
		{"missing file", luft.Script{Path: filepath.Join(t.TempDir(), "none.lua")}, "none.lua"},
		{"args a channel", luft.Script{Source: "function main() end", Args: make(chan int)}, "Script.Args cannot be encoded"},
		{"args a string", luft.Script{Source: "function main() end", Args: "hello"}, "object or array"},
		{"class", luft.Script{Source: "function main() end", Class: "urgent"}, "Script.Class"},
		{"timeout", luft.Script{Source: "function main() end", Timeout: -1}, "Script.Timeout"},
		{"agent calls", luft.Script{Source: "function main() end", MaxAgentCalls: -1}, "Script.MaxAgentCalls"},
		{"agent calls huge", luft.Script{Source: "function main() end", MaxAgentCalls: math.MaxInt}, "Script.MaxAgentCalls"},
		{"backend", luft.Script{Source: "function main() end", Backend: "ghost"}, "Script.Backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := eng.Start(t.Context(), tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// A nil context is refused by every method that takes one.
	var nilCtx context.Context
	nilErrs := map[string]error{}
	_, nilErrs["Start"] = eng.Start(nilCtx, luft.Script{Source: "function main() end"})
	_, nilErrs["Run"] = eng.Run(nilCtx, luft.Script{Source: "function main() end"})
	_, nilErrs["Resume"] = eng.Resume(nilCtx, "x")
	_, nilErrs["Status"] = eng.Status(nilCtx, "x")
	_, nilErrs["List"] = eng.List(nilCtx, luft.ListOptions{})
	nilErrs["Cancel"] = eng.Cancel(nilCtx, "x")
	for _, err := range eng.Events(nilCtx, "x", 0) {
		nilErrs["Events"] = err
	}
	for op, err := range nilErrs {
		if err == nil || !strings.Contains(err.Error(), "ctx is nil") {
			t.Errorf("%s with a nil context: %v", op, err)
		}
	}
	runs, err := eng.List(t.Context(), luft.ListOptions{})
	if err != nil || len(runs) != 0 {
		t.Fatalf("refused scripts left %d runs (%v)", len(runs), err)
	}
	// Args nested past the VM's limit fail the run with a message, not the process.
	res, err := eng.Run(t.Context(), luft.Script{Source: "function main() end", Args: deep})
	if err == nil {
		t.Fatalf("args nested 200 deep: %s with no error", res.Status)
	}
}

// A custom backend that panics, errors, or reports nonsense fails the agent call, which
// the script sees (r.ok false) and may handle; the Engine goes on.
func TestMisbehavingBackend(t *testing.T) {
	bad := luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		switch req.Prompt {
		case "panic":
			panic("model exploded")
		case "error":
			return luft.Response{}, errors.New("quota used up")
		case "negative":
			return luft.Response{Text: "x", Usage: luft.Usage{Input: -5}}, nil
		case "nan":
			return luft.Response{Text: "x", Cost: math.NaN()}, nil
		}
		return luft.Response{Text: "fine"}, nil
	})
	eng := newEngine(t, luft.Options{Backend: "bad"}, luft.WithBackend("bad", bad))
	res, err := eng.Run(t.Context(), luft.Script{Source: `function main()
  local out = {}
  for _, p in ipairs({"panic", "error", "negative", "nan", "ok"}) do
    local r = agent{prompt=p, retries=0}
    out[#out + 1] = p .. "=" .. tostring(r.ok) .. ":" .. (r.error or r.output)
  end
  report(table.concat(out, "\n"))
end`})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report.(string)
	for _, want := range []string{"panic=false:backend bad panicked: model exploded", "error=false:quota used up",
		"negative=false:backend bad: negative or invalid usage", "nan=false:backend bad: negative or invalid usage or cost", "ok=true:fine"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

// List, Status and Resume refuse arguments they cannot use.
func TestQueryRefusesBadArguments(t *testing.T) {
	eng := newEngine(t, luft.Options{})
	res, err := eng.Run(t.Context(), luft.Script{Source: "function main() end"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.List(t.Context(), luft.ListOptions{Limit: -1}); err == nil || !strings.Contains(err.Error(), "Limit -1") {
		t.Errorf("List with Limit -1: %v", err)
	}
	if _, err := eng.List(t.Context(), luft.ListOptions{Status: "finished"}); err == nil || !strings.Contains(err.Error(), `"finished" is not a run status`) {
		t.Errorf("List with a bad status: %v", err)
	}
	if runs, err := eng.List(t.Context(), luft.ListOptions{Status: luft.StatusCompleted, Limit: 1}); err != nil || len(runs) != 1 || runs[0].ID != res.RunID {
		t.Errorf("List of completed runs: %v %v", runs, err)
	}
	if _, err := eng.Status(t.Context(), ""); err == nil {
		t.Error("Status of an empty id: no error")
	}
	if _, err := eng.Resume(t.Context(), ""); err == nil {
		t.Error("Resume of an empty id: no error")
	}
	if _, err := eng.Resume(t.Context(), res.RunID, luft.ResumeOptions{}, luft.ResumeOptions{}); err == nil {
		t.Error("Resume with two ResumeOptions: no error")
	}
}

// A state dir whose luft.db is not a database is refused, naming it; nothing is written.
func TestNewCorruptStateDir(t *testing.T) {
	dir := t.TempDir()
	junk := []byte("this is not a SQLite database, it is a shopping list\n")
	if err := os.WriteFile(filepath.Join(dir, "luft.db"), junk, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := luft.New(luft.Options{StateDir: dir, Getenv: func(string) string { return "" }})
	if err == nil || !strings.Contains(err.Error(), "corrupt") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("New over a corrupt luft.db: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "luft.db")); string(got) != string(junk) {
		t.Fatal("New changed the corrupt luft.db")
	}
}
