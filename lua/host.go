package lua

import (
	"context"

	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
)

// Call names one effect of a run: its call key (branch path plus a per-branch counter, so
// completion order never changes it), its kind, the SHA-256 of its canonical input, the
// script position that issued it, and the phase it belongs to.
type Call struct {
	Key     string
	Kind    string // "agent", "now", "random", "uuid", "workflow"
	Hash    string
	Where   string // "file.lua:12"
	PhaseID int
}

// Effect kinds.
const (
	KindAgent    = "agent"
	KindNow      = "now"
	KindRandom   = "random"
	KindUUID     = "uuid"
	KindWorkflow = "workflow"
)

// Host is everything the VM needs from the run that owns it. Every effect a script has goes
// through it with a Call, so the host can journal, replay, budget and schedule it. All
// methods are called on the VM goroutine.
type Host interface {
	// Agent runs one agent call. When the host already has the result (a journal hit) it
	// returns it with done=true and the script continues without yielding. Otherwise it
	// starts the call and returns done=false; complete must then be called exactly once,
	// from any goroutine. A non-nil error means the call was refused before it started (a
	// limit or budget); the script sees it as the call's failure.
	Agent(ctx context.Context, c Call, req agent.Request, complete func(agent.Result, error)) (res agent.Result, done bool, err error)
	// Value returns the recorded value of a deterministic effect (luft.now/random/uuid),
	// or computes it with fresh and records it. The value is plain JSON-able Go data.
	Value(c Call, fresh func() any) (any, error)
	// LoadWorkflow returns the source of the workflow file name inside dir, the calling
	// script's folder. The VM has already refused absolute paths, paths that climb out
	// of dir with "..", and names that do not end in ".lua"; the host must refuse a name
	// that leaves dir through a symlink, and anything but a regular file. Its errors must
	// never quote the file's contents. The file's path in calls and events is
	// filepath.Join(dir, name).
	LoadWorkflow(c Call, dir, name string) ([]byte, error)
	// SetBudget applies budget{} limits to the run.
	SetBudget(b Budget) error
	// Emit accepts one event of the run.
	Emit(ev event.Event)
}

// Budget is what a script asked for with budget{}. Zero fields are unlimited.
type Budget struct {
	TimeMS int64   `json:"time_ms,omitempty"`
	Agents int     `json:"agents,omitempty"`
	Tokens int     `json:"tokens,omitempty"`
	USD    float64 `json:"usd,omitempty"`
	// Rounds is the hint of Luft's budget(time_ms, rounds): converge's default max_rounds
	// and ctx.budget.rounds. It limits nothing.
	Rounds int `json:"rounds,omitempty"`
}
