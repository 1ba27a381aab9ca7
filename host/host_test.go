package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

func noEnv(string) string { return "" }

// recorder stands in front of a host's scheduler and notes the turns it is asked to admit.
type recorder struct {
	s     scheduler.Scheduler
	mu    sync.Mutex
	turns []scheduler.Turn
}

func (r *recorder) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	r.mu.Lock()
	r.turns = append(r.turns, t)
	r.mu.Unlock()
	return r.s.Admit(ctx, t)
}

// A host is built in two steps: Open gives the backends of the config (no scheduler, no
// Service yet), Serve the one scheduler and the Service over a store; a run's turns pass
// that scheduler, wrapped as the door asked, under the door's caller.
func TestOpenThenServe(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "luft.toml"), []byte(`default_backend = "local"
[backends.local]
type = "mock"
model = "m1"
`))
	if err != nil {
		t.Fatal(err)
	}
	h, err := Open(Options{StateDir: dir, Config: cfg, Getenv: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if h.Service != nil || h.Scheduler != nil {
		t.Fatalf("Open served already: %+v", h)
	}
	if h.Registry.Default() != "mock" || !slices.Contains(h.Registry.IDs(), "acp:claude") {
		t.Fatalf("registry: default %q, ids %v", h.Registry.Default(), h.Registry.IDs())
	}
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var rec *recorder
	wrap := func(s scheduler.Scheduler) scheduler.Scheduler { rec = &recorder{s: s}; return rec }
	if err := h.Serve(st, ServeOptions{Caller: "door", WrapScheduler: wrap}); err != nil {
		t.Fatal(err)
	}
	if h.Scheduler != rec {
		t.Fatalf("the Service's scheduler is not the wrapped one: %T", h.Scheduler)
	}
	run, err := h.Service.Start(t.Context(), runtime.Spec{Path: "w.lua", Source: []byte(`function main() return agent{prompt="hi"} end`)})
	if err != nil {
		t.Fatal(err)
	}
	if res := run.Wait(); res.Status != runtime.StatusCompleted {
		t.Fatalf("run %s: %v", res.Status, res.Err)
	}
	if len(rec.turns) != 1 || rec.turns[0].Caller != "door" || !strings.HasPrefix(rec.turns[0].Lane, "mock/") {
		t.Fatalf("turns %+v: want one turn of caller door on the mock", rec.turns)
	}
	if _, err := os.Stat(filepath.Join(h.Service.RunDir(run.ID), "w.lua")); err != nil {
		t.Fatalf("the run's script is not kept in the state dir: %v", err)
	}
}

// Open refuses a config whose backends cannot be built, naming the entry.
func TestOpenNamesTheBackendAtFault(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse(filepath.Join(dir, "luft.toml"), []byte(`[backends.canned]
type = "mockfile"
mock_file = "nowhere.json"
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Options{StateDir: dir, Config: cfg, Getenv: noEnv}); err == nil || !strings.Contains(err.Error(), "backends.canned") {
		t.Fatalf("got %v, want an error naming backends.canned", err)
	}
}

// The state dir and the config file in use are protected from the agents.
func TestProtectedPaths(t *testing.T) {
	if got := ProtectedPaths("/s", config.Config{}); !slices.Equal(got, []string{"/s"}) {
		t.Fatalf("no config file: %v", got)
	}
	if got := ProtectedPaths("/s", config.Config{Path: "/w/luft.toml"}); !slices.Equal(got, []string{"/s", "/w/luft.toml"}) {
		t.Fatalf("with a config file: %v", got)
	}
}

// The sandbox limits of a run come from [limits], its agent calls from the door.
func TestScriptAndEventLimits(t *testing.T) {
	l := config.Limits{MaxLogBytes: 1, MaxReportBytes: 2, MaxEventBytes: 3, MaxEvents: 4, MaxEventsBytes: 5}
	if s := ScriptLimits(l, 7); s.MaxAgentCalls != 7 || s.MaxLogBytes != 1 || s.MaxReportBytes != 2 {
		t.Fatalf("script limits %+v", s)
	}
	if e := EventLimits(l); e.MaxEventBytes != 3 || e.MaxEvents != 4 || e.MaxTotalBytes != 5 {
		t.Fatalf("event limits %+v", e)
	}
}
