package storage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// BudgetAmounts is one amount of each level of a shared budget: requests, tokens (a
// provider's one token bucket), and input and output tokens (Anthropic's separate
// buckets).
type BudgetAmounts struct{ Requests, Tokens, Input, Output float64 }

// BudgetGrant is what one TakeBudget gave a node from a shared budget.
type BudgetGrant struct {
	Got   BudgetAmounts // taken from the shared levels, the node's to spend
	Limit BudgetAmounts // the limits known so far; 0 = unknown, < 0 = silent
	Rate  BudgetAmounts // their refill per second
	// Scout is set when no limit is known and this node now scouts the budget until
	// ScoutUntil: it may send one request to learn the limits; the others wait.
	Scout      bool
	ScoutUntil time.Time
}

// Known reports whether any of the budget's limits is known (a reading arrived).
func (g BudgetGrant) Known() bool {
	return g.Limit.Requests > 0 || g.Limit.Tokens > 0 || g.Limit.Input > 0 || g.Limit.Output > 0
}

// BudgetLevel is what a provider's rate-limit headers said of one level (the limit and
// the count left; Has* say which of them it said), with what the node learned of it.
type BudgetLevel struct {
	Limit, Remaining       float64
	HasLimit, HasRemaining bool
	// Rate is the refill per second the node uses (0 = none yet); Learned says it was
	// measured from readings rather than taken as the limit per minute. A guess never
	// overwrites a measured rate.
	Rate    float64
	Learned bool
	// WindowEnd is set when the node knows the level is a fixed window: its end, when
	// all of it refills at once.
	WindowEnd time.Time
}

// BudgetReading is what one response's rate-limit headers said of a budget's levels.
type BudgetReading struct {
	Requests, Tokens, Input, Output BudgetLevel
	// Silent: a successful answer that carried no rate-limit headers. A budget whose
	// limits are unknown is then marked silent (limits -1): nothing is shared, no node
	// scouts it, and each node paces its turns on its own buckets, until a reading with
	// limits comes.
	Silent bool
}

func (r BudgetReading) levels() [4]BudgetLevel {
	return [4]BudgetLevel{r.Requests, r.Tokens, r.Input, r.Output}
}

// pgDims are the column prefixes of a budget's levels, in BudgetAmounts' order.
var pgDims = [4]string{"req", "tok", "in", "out"}

// pgRate is a level's refill per second: the learned one, else its limit per minute.
func pgRate(d string) string {
	return fmt.Sprintf(`(CASE WHEN %[1]s_rate > 0 THEN %[1]s_rate ELSE %[1]s_limit/60.0 END)`, d)
}

// pgLevel is a level now (0 while its limit is unknown): a continuous one refilled at
// its rate since at, at most the limit; a fixed window's as it was until the window
// ends, and then full. now() is the statement's start; a row written later by another
// node's statement (at > now()) refills nothing.
func pgLevel(d string) string {
	return fmt.Sprintf(`(CASE WHEN %[1]s_limit <= 0 THEN 0
		WHEN %[1]s_reset IS NULL THEN least(%[1]s_limit, %[1]s_level + %[2]s*greatest(0, extract(epoch FROM now() - at)))
		WHEN now() >= %[1]s_reset THEN %[1]s_limit
		ELSE least(%[1]s_limit, %[1]s_level) END)`, d, pgRate(d))
}

// pgReset is a fixed window's end after this statement: once now() has passed it, the
// end of the minute-long window now() is in (a reading later gives the real one).
func pgReset(d string) string {
	return fmt.Sprintf(`(CASE WHEN %[1]s_reset IS NOT NULL AND now() >= %[1]s_reset
		THEN %[1]s_reset + make_interval(secs => 60*(floor(extract(epoch FROM now() - %[1]s_reset)/60) + 1))
		ELSE %[1]s_reset END)`, d)
}

// pgGot is what a take grants of a level ($want of it wanted, $4+… the margin in
// seconds): never the last rate × margin of it. A level whose limit is unknown grants
// nothing of requests (the scout's request goes out on the scout's word) and what is
// wanted of tokens (nothing bounds them).
func pgGot(i int, want, margin string) string {
	d := pgDims[i]
	got := fmt.Sprintf(`greatest(0, least(%s::float8, %s - %s*%s::float8))`, want, pgLevel(d), pgRate(d), margin)
	unknown := want + "::float8"
	if i == 0 {
		got, unknown = "floor("+got+")", "0"
	}
	return fmt.Sprintf(`(CASE WHEN %s_limit > 0 THEN %s ELSE %s END)`, d, got, unknown)
}

// pgUnknown: no limit of the budget is known.
const pgUnknown = `(req_limit = 0 AND tok_limit = 0 AND in_limit = 0 AND out_limit = 0)`

// The statements of the shared budgets. Each is one UPDATE whose SET expressions read
// the row as it is when the row lock is taken (a concurrent take re-evaluates them on
// the row the other committed), so no two takes grant the same tokens. Every statement
// materialises all four levels, since they share at.
var (
	// $1 key, $2–$5 wanted, $6 margin, $7 node, $8 scouting time.
	pgTakeBudget   = pgTake()
	pgInsertBudget = `INSERT INTO budgets (key) VALUES ($1) ON CONFLICT (key) DO NOTHING`
	// $1 key, $2–$5 given back.
	pgGiveBudget = pgGive()
	// $1 key, then five per level: limit, remaining (NULL = not said), rate, learned,
	// window end (NULL = continuous).
	pgLowerBudget = pgLower()
	// A silent provider's answer marks a budget still unknown as silent.
	pgSilentBudget = `UPDATE budgets SET req_limit = -1, tok_limit = -1, in_limit = -1, out_limit = -1,
		req_level = 0, tok_level = 0, in_level = 0, out_level = 0,
		req_reset = NULL, tok_reset = NULL, in_reset = NULL, out_reset = NULL,
		scout = '', at = greatest(at, now())
		WHERE key = $1 AND req_limit <= 0 AND tok_limit <= 0 AND in_limit <= 0 AND out_limit <= 0`
)

func pgTake() string {
	var set, ret []string
	for i, d := range pgDims {
		got := pgGot(i, fmt.Sprintf("$%d", i+2), "$6")
		set = append(set,
			fmt.Sprintf(`%s_got = CASE WHEN %s THEN 0 ELSE %s END`, d, pgUnknown, got),
			fmt.Sprintf(`%s_level = %s - (CASE WHEN %s_limit > 0 THEN %s ELSE 0 END)`, d, pgLevel(d), d, got),
			fmt.Sprintf(`%s_reset = %s`, d, pgReset(d)))
		ret = append(ret, d+"_got")
	}
	for _, d := range pgDims {
		ret = append(ret, d+"_limit")
	}
	for _, d := range pgDims {
		ret = append(ret, pgRate(d))
	}
	scouts := `(` + pgUnknown + ` AND (scout = '' OR scout = $7 OR scout_until < now()))`
	set = append(set, `at = greatest(at, now())`,
		`scout = CASE WHEN `+scouts+` THEN $7 ELSE scout END`,
		`scout_until = CASE WHEN `+scouts+` THEN now() + make_interval(secs => $8::float8) ELSE scout_until END`)
	ret = append(ret, pgUnknown+` AND scout = $7`, `scout_until`)
	return `UPDATE budgets SET ` + strings.Join(set, ",\n") + ` WHERE key = $1 RETURNING ` + strings.Join(ret, ", ")
}

// pgGive adds unspent grants back, up to the limit. A fixed window's are not given
// back: the node cannot tell whether the window they were taken in has ended, and the
// next window's level is full without them.
func pgGive() string {
	var set []string
	for i, d := range pgDims {
		set = append(set,
			fmt.Sprintf(`%[1]s_level = CASE WHEN %[1]s_limit <= 0 THEN 0 WHEN %[1]s_reset IS NOT NULL THEN %[2]s
				ELSE least(%[1]s_limit, %[2]s + $%[3]d::float8) END`, d, pgLevel(d), i+2),
			fmt.Sprintf(`%s_reset = %s`, d, pgReset(d)))
	}
	set = append(set, `at = greatest(at, now())`)
	return `UPDATE budgets SET ` + strings.Join(set, ",\n") + ` WHERE key = $1`
}

// pgLower applies a reading. It only ever lowers a known level (a node's late reading
// must not give back what others spent since), except that a reading of a fixed window
// that ends later than the one the row knows is the new window's level. It sets a
// level that was unknown, takes the limits it reports, keeps a measured rate against a
// guess, and ends the scouting.
func pgLower() string {
	p := func(i, k int) string { return fmt.Sprintf("$%d", 2+5*i+k) }
	var said []string
	for i := range pgDims {
		said = append(said, p(i, 0)+"::float8 > 0")
	}
	anyLimit := "(" + strings.Join(said, " OR ") + ")"
	var set []string
	for i, d := range pgDims {
		lim, rem, rate, learned, end := p(i, 0)+"::float8", p(i, 1)+"::float8", p(i, 2)+"::float8", p(i, 3)+"::bool", p(i, 4)+"::timestamptz"
		newLimit := fmt.Sprintf(`(%s > 0 AND %s <> %s_limit)`, lim, lim, d)
		set = append(set,
			fmt.Sprintf(`%[1]s_level = CASE WHEN %[3]s IS NULL THEN %[2]s
				WHEN %[1]s_limit > 0 AND %[4]s IS NOT NULL AND %[1]s_reset IS NOT NULL AND %[4]s > %[1]s_reset + interval '1 second'
					THEN least(%[1]s_limit, %[3]s)
				WHEN %[1]s_limit > 0 THEN least(%[2]s, %[3]s)
				WHEN %[5]s > 0 THEN least(%[3]s, %[5]s)
				ELSE %[2]s END`, d, pgLevel(d), rem, end, lim),
			fmt.Sprintf(`%s_limit = CASE WHEN %s > 0 THEN %s WHEN %s_limit < 0 AND %s THEN 0 ELSE %s_limit END`,
				d, lim, lim, d, anyLimit, d),
			fmt.Sprintf(`%[1]s_rate = CASE WHEN %[2]s <= 0 THEN %[1]s_rate WHEN %[3]s OR %[4]s OR NOT %[1]s_learned THEN %[2]s ELSE %[1]s_rate END`,
				d, rate, newLimit, learned),
			fmt.Sprintf(`%[1]s_learned = CASE WHEN %[2]s <= 0 THEN %[1]s_learned WHEN %[3]s THEN %[4]s ELSE %[1]s_learned OR %[4]s END`,
				d, rate, newLimit, learned),
			fmt.Sprintf(`%s_reset = CASE WHEN %s IS NOT NULL THEN %s WHEN %s THEN NULL ELSE %s END`, d, end, end, newLimit, pgReset(d)))
	}
	set = append(set, `at = greatest(at, now())`, `scout = CASE WHEN `+anyLimit+` THEN '' ELSE scout END`)
	return `UPDATE budgets SET ` + strings.Join(set, ",\n") + ` WHERE key = $1`
}

// budgetDB is the connection the shared budgets use: their own, so that a take never
// queues behind journal writes.
func openBudgetDB(cc *pgx.ConnConfig) *sql.DB {
	db := stdlib.OpenDB(*cc.Copy())
	db.SetMaxOpenConns(2)
	db.SetMaxIdleConns(2)
	return db
}

// TakeBudget takes up to want of each level from the shared budget key for node,
// leaving rate × margin of each level untaken (SPEC §9: one budget per key across
// nodes). While no limit of the budget is known, it grants nothing and makes node the
// budget's scout for scoutFor, unless another node scouts and its time has not lapsed.
func (p *Postgres) TakeBudget(ctx context.Context, key, node string, want BudgetAmounts, margin, scoutFor time.Duration) (BudgetGrant, error) {
	var g BudgetGrant
	for try := 0; ; try++ {
		err := p.budget.QueryRowContext(ctx, pgTakeBudget, key, want.Requests, want.Tokens, want.Input, want.Output,
			margin.Seconds(), node, scoutFor.Seconds()).
			Scan(&g.Got.Requests, &g.Got.Tokens, &g.Got.Input, &g.Got.Output,
				&g.Limit.Requests, &g.Limit.Tokens, &g.Limit.Input, &g.Limit.Output,
				&g.Rate.Requests, &g.Rate.Tokens, &g.Rate.Input, &g.Rate.Output, &g.Scout, &g.ScoutUntil)
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

// GiveBudget gives back unspent amounts of earlier grants.
func (p *Postgres) GiveBudget(ctx context.Context, key string, back BudgetAmounts) error {
	if _, err := p.budget.ExecContext(ctx, pgGiveBudget, key, back.Requests, back.Tokens, back.Input, back.Output); err != nil {
		return fmt.Errorf("storage: give back to shared budget in %s: %w", p.path, err)
	}
	return nil
}

// LowerBudget applies a provider's reading to the shared budget key: it may only lower
// a known level, never raise it (but see pgLower for a fixed window's next one).
func (p *Postgres) LowerBudget(ctx context.Context, key string, r BudgetReading) error {
	if r.Silent {
		if _, err := p.budget.ExecContext(ctx, pgSilentBudget, key); err != nil {
			return fmt.Errorf("storage: mark shared budget silent in %s: %w", p.path, err)
		}
		return nil
	}
	args := []any{key}
	for _, l := range r.levels() {
		lim := 0.0
		if l.HasLimit && l.Limit > 0 {
			lim = l.Limit
		}
		rem := sql.NullFloat64{Float64: l.Remaining, Valid: l.HasRemaining}
		end := sql.NullTime{Time: l.WindowEnd, Valid: !l.WindowEnd.IsZero()}
		args = append(args, lim, rem, max(l.Rate, 0), l.Learned && l.Rate > 0, end)
	}
	if _, err := p.budget.ExecContext(ctx, pgLowerBudget, args...); err != nil {
		return fmt.Errorf("storage: lower shared budget in %s: %w", p.path, err)
	}
	return nil
}
