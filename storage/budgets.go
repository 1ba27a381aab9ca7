package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// BudgetGrant is what one TakeBudget gave a node from a shared budget.
type BudgetGrant struct {
	Requests, Tokens   float64 // taken from the shared levels, the node's to spend
	ReqLimit, TokLimit float64 // the limits known so far; 0 = unknown
	ReqRate, TokRate   float64 // their refill per second
	// Scout is set when no limit is known and this node now scouts the budget until
	// ScoutUntil: it may send one request to learn the limits; the others wait.
	Scout      bool
	ScoutUntil time.Time
}

// Known reports whether the budget's limits are known (a reading arrived).
func (g BudgetGrant) Known() bool { return g.ReqLimit > 0 || g.TokLimit > 0 }

// BudgetReading is what a provider's rate-limit headers said (the limits and the
// counts left; Has* say which of them it said) and the refill rates per second the node
// learned from them (0 = not learned).
type BudgetReading struct {
	ReqRate, TokRate       float64
	ReqLimit, ReqRemaining float64
	TokLimit, TokRemaining float64
	HasReqLimit, HasReq    bool
	HasTokLimit, HasTok    bool
	// Silent: a successful answer that carried no rate-limit headers. A budget whose
	// limits are unknown is then marked silent (limits -1): nothing is shared, no node
	// scouts it, and each node paces its turns on its own buckets, until a reading with
	// limits comes.
	Silent bool
}

// The level of a budget now: refilled at limit/60 per second since at, at most the
// limit (0 while the limit is unknown). now() is the statement's start; a row written
// later by another node's statement (at > now()) refills nothing.
const (
	pgReqRate  = `(CASE WHEN req_rate > 0 THEN req_rate ELSE req_limit/60.0 END)`
	pgTokRate  = `(CASE WHEN tok_rate > 0 THEN tok_rate ELSE tok_limit/60.0 END)`
	pgReqLevel = `(CASE WHEN req_limit > 0 THEN least(req_limit, req_level + ` + pgReqRate + `*greatest(0, extract(epoch FROM now() - at))) ELSE 0 END)`
	pgTokLevel = `(CASE WHEN tok_limit > 0 THEN least(tok_limit, tok_level + ` + pgTokRate + `*greatest(0, extract(epoch FROM now() - at))) ELSE 0 END)`
	// What a take grants ($2 requests, $3 tokens wanted, $4 the margin in seconds): never
	// the last rate × margin of a level; a budget whose limit is unknown grants nothing
	// (the scout's request goes out on the scout's word, not on a grant).
	pgReqGot  = `(CASE WHEN req_limit > 0 THEN greatest(0, least($2::float8, floor(` + pgReqLevel + ` - ` + pgReqRate + `*$4::float8))) ELSE 0 END)`
	pgTokGot  = `(CASE WHEN tok_limit > 0 THEN greatest(0, least($3::float8, ` + pgTokLevel + ` - ` + pgTokRate + `*$4::float8)) ELSE $3::float8 END)`
	pgUnknown = `(req_limit = 0 AND tok_limit = 0)`
)

// The statements of the shared budgets. Each is one UPDATE whose SET expressions read
// the row as it is when the row lock is taken (a concurrent take re-evaluates them on
// the row the other committed), so no two takes grant the same tokens.
const (
	pgTakeBudget = `UPDATE budgets SET
		req_got = ` + pgReqGot + `,
		tok_got = CASE WHEN ` + pgUnknown + ` THEN 0 ELSE ` + pgTokGot + ` END,
		req_level = ` + pgReqLevel + ` - ` + pgReqGot + `,
		tok_level = ` + pgTokLevel + ` - (CASE WHEN tok_limit > 0 THEN ` + pgTokGot + ` ELSE 0 END),
		at = greatest(at, now()),
		scout = CASE WHEN ` + pgUnknown + ` AND (scout = '' OR scout = $5 OR scout_until < now()) THEN $5 ELSE scout END,
		scout_until = CASE WHEN ` + pgUnknown + ` AND (scout = '' OR scout = $5 OR scout_until < now())
			THEN now() + make_interval(secs => $6::float8) ELSE scout_until END
		WHERE key = $1
		RETURNING req_got, tok_got, req_limit, tok_limit, ` + pgReqRate + `, ` + pgTokRate + `, ` + pgUnknown + ` AND scout = $5, scout_until`
	pgInsertBudget = `INSERT INTO budgets (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`
	// A give-back adds unspent grants back, up to the limit.
	pgGiveBudget = `UPDATE budgets SET
		req_level = CASE WHEN req_limit > 0 THEN least(req_limit, ` + pgReqLevel + ` + $2::float8) ELSE 0 END,
		tok_level = CASE WHEN tok_limit > 0 THEN least(tok_limit, ` + pgTokLevel + ` + $3::float8) ELSE 0 END,
		at = greatest(at, now())
		WHERE key = $1`
	// A reading only ever lowers a known level (a node's late reading must not give back
	// what others spent since); it sets a level that was unknown, takes the limits it
	// reports, and ends the scouting.
	pgLowerBudget = `UPDATE budgets SET
		req_level = CASE WHEN $3::bool AND req_limit > 0 THEN least(` + pgReqLevel + `, $2::float8)
			WHEN $3::bool AND $4::bool THEN least($2::float8, $5::float8) ELSE ` + pgReqLevel + ` END,
		tok_level = CASE WHEN $7::bool AND tok_limit > 0 THEN least(` + pgTokLevel + `, $6::float8)
			WHEN $7::bool AND $8::bool THEN least($6::float8, $9::float8) ELSE ` + pgTokLevel + ` END,
		req_limit = CASE WHEN $4::bool AND $5::float8 > 0 THEN $5::float8
			WHEN req_limit < 0 AND $8::bool AND $9::float8 > 0 THEN 0 ELSE req_limit END,
		tok_limit = CASE WHEN $8::bool AND $9::float8 > 0 THEN $9::float8
			WHEN tok_limit < 0 AND $4::bool AND $5::float8 > 0 THEN 0 ELSE tok_limit END,
		at = greatest(at, now()),
		req_rate = CASE WHEN $10::float8 > 0 THEN $10::float8 ELSE req_rate END,
		tok_rate = CASE WHEN $11::float8 > 0 THEN $11::float8 ELSE tok_rate END,
		scout = CASE WHEN ($4::bool AND $5::float8 > 0) OR ($8::bool AND $9::float8 > 0) THEN '' ELSE scout END
		WHERE key = $1`
	// A silent provider's answer marks a budget still unknown as silent.
	pgSilentBudget = `UPDATE budgets SET req_limit = -1, tok_limit = -1, req_level = 0, tok_level = 0,
		scout = '', at = greatest(at, now())
		WHERE key = $1 AND req_limit <= 0 AND tok_limit <= 0`
)

// budgetDB is the connection the shared budgets use: their own, so that a take never
// queues behind journal writes.
func openBudgetDB(cc *pgx.ConnConfig) *sql.DB {
	db := stdlib.OpenDB(*cc.Copy())
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	return db
}

// TakeBudget takes up to reqs requests and toks tokens from the shared budget key for
// node, leaving rate × margin of each level untaken (SPEC §9: one budget per key across
// nodes). While no limit of the budget is known, it grants nothing and makes node the
// budget's scout for scoutFor, unless another node scouts and its time has not lapsed.
func (p *Postgres) TakeBudget(ctx context.Context, key, node string, reqs, toks float64, margin, scoutFor time.Duration) (BudgetGrant, error) {
	var g BudgetGrant
	for try := 0; ; try++ {
		err := p.budget.QueryRowContext(ctx, pgTakeBudget, key, reqs, toks, margin.Seconds(), node, scoutFor.Seconds()).
			Scan(&g.Requests, &g.Tokens, &g.ReqLimit, &g.TokLimit, &g.ReqRate, &g.TokRate, &g.Scout, &g.ScoutUntil)
		if errors.Is(err, sql.ErrNoRows) && try == 0 {
			if _, err := p.budget.ExecContext(ctx, pgInsertBudget, key); err != nil {
				return BudgetGrant{}, fmt.Errorf("storage: create shared budget in %s: %w", p.path, err)
			}
			continue
		}
		if err != nil {
			return BudgetGrant{}, fmt.Errorf("storage: take from shared budget in %s: %w", p.path, err)
		}
		return g, nil
	}
}

// GiveBudget gives back unspent requests and tokens of earlier grants.
func (p *Postgres) GiveBudget(ctx context.Context, key string, reqs, toks float64) error {
	if _, err := p.budget.ExecContext(ctx, pgGiveBudget, key, reqs, toks); err != nil {
		return fmt.Errorf("storage: give back to shared budget in %s: %w", p.path, err)
	}
	return nil
}

// LowerBudget applies a provider's reading to the shared budget key: it may only lower
// a known level, never raise it.
func (p *Postgres) LowerBudget(ctx context.Context, key string, r BudgetReading) error {
	if r.Silent {
		if _, err := p.budget.ExecContext(ctx, pgSilentBudget, key); err != nil {
			return fmt.Errorf("storage: mark shared budget silent in %s: %w", p.path, err)
		}
		return nil
	}
	if _, err := p.budget.ExecContext(ctx, pgLowerBudget, key, r.ReqRemaining, r.HasReq, r.HasReqLimit, r.ReqLimit,
		r.TokRemaining, r.HasTok, r.HasTokLimit, r.TokLimit, r.ReqRate, r.TokRate); err != nil {
		return fmt.Errorf("storage: lower shared budget in %s: %w", p.path, err)
	}
	return nil
}
