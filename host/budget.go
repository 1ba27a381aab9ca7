package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// budgetStore is a store whose rate-limit budgets several nodes share
// (storage.Postgres); SQLite has none, and its one machine keeps its own buckets.
type budgetStore interface {
	TakeBudget(ctx context.Context, key, node string, want storage.BudgetAmounts, margin, scoutFor time.Duration) (storage.BudgetGrant, error)
	GiveBudget(ctx context.Context, key string, back storage.BudgetAmounts) error
	LowerBudget(ctx context.Context, key string, r storage.BudgetReading) error
}

// sharedBudget is a budgetStore as the scheduler's SharedBudget, for one process
// (node names it as a scout).
type sharedBudget struct {
	st   budgetStore
	node string
}

func (b sharedBudget) Take(ctx context.Context, key string, want scheduler.SharedAmounts, margin, scoutFor time.Duration) (scheduler.SharedGrant, error) {
	g, err := b.st.TakeBudget(ctx, key, b.node, storage.BudgetAmounts(want), margin, scoutFor)
	return scheduler.SharedGrant{Got: scheduler.SharedAmounts(g.Got), Limit: scheduler.SharedAmounts(g.Limit),
		Rate: scheduler.SharedAmounts(g.Rate), Scout: g.Scout, ScoutUntil: g.ScoutUntil}, err
}

func (b sharedBudget) Give(ctx context.Context, key string, back scheduler.SharedAmounts) error {
	return b.st.GiveBudget(ctx, key, storage.BudgetAmounts(back))
}

func (b sharedBudget) Lower(ctx context.Context, key string, r scheduler.SharedReading) error {
	return b.st.LowerBudget(ctx, key, storage.BudgetReading{Requests: storage.BudgetLevel(r.Requests),
		Tokens: storage.BudgetLevel(r.Tokens), Input: storage.BudgetLevel(r.Input), Output: storage.BudgetLevel(r.Output),
		Silent: r.Silent})
}

// share makes ex share the budgets of the HTTP backends' lanes through st, when st is a
// store that several nodes share.
func (h *Host) share(ex *scheduler.Executor, st storage.Store, o ServeOptions) {
	bs, ok := st.(budgetStore)
	if !ok {
		return
	}
	node := o.Node
	if node == "" {
		node, _ = os.Hostname()
	}
	ex.Share(scheduler.SharedConfig{
		Budget: sharedBudget{st: bs, node: fmt.Sprintf("%s/%d", node, os.Getpid())},
		Key:    h.budgetKey,
		Logf:   o.Logf,
	})
}

// budgetKey is the shared budget of a lane ("backend/model"): a hash of the model and
// the endpoint the backend sends to, so that daemons with the backend under other names
// share one budget, and the API key is never stored. A backend that speaks no HTTP API
// (mock, ACP agents) has none.
func (h *Host) budgetKey(lane string) string {
	name, model, _ := strings.Cut(lane, "/")
	b, ok := h.opts.Config.Backends[name]
	if !ok || b.Type != "openai" && b.Type != "anthropic" {
		return ""
	}
	url := b.BaseURL
	if url == "" && h.opts.Getenv != nil && b.Type == "openai" {
		url = h.opts.Getenv("OPENAI_BASE_URL")
	}
	switch {
	case url != "":
	case b.Type == "anthropic":
		url = "https://api.anthropic.com/v1"
	default:
		url = "https://api.openai.com/v1"
	}
	var key string
	if h.opts.Getenv != nil && b.APIKeyEnv != "" {
		key = h.opts.Getenv(b.APIKeyEnv)
	}
	sum := sha256.Sum256([]byte(strings.TrimRight(url, "/") + "\x00" + model + "\x00" + key))
	return hex.EncodeToString(sum[:16])
}
