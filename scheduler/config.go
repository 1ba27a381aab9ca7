package scheduler

import "time"

// LaneConfig is what is configured for one lane (a backend + model). Zero values mean
// "unknown": budgets are then learned from the rate-limit headers of every response, and
// an unknown budget never blocks a turn.
type LaneConfig struct {
	Slots    int    // concurrent turns per replica; 0 = unlimited (hosted APIs)
	Replicas int    // interchangeable endpoints of the same model; 0 or 1 = one
	TPM      int    // tokens per minute; 0 = learn from headers
	RPM      int    // requests per minute; 0 = learn from headers
	Fallback string // lane that takes this lane's turns while its circuit is open; "" = none
	// Scout, for an endpoint that reports its limits in response headers while none are
	// configured: until the lane's first response, one turn runs at a time, so a burst
	// waits for the limits that response teaches instead of running into a 429. It costs
	// no request of its own (the first real turn is the scout).
	Scout bool
}

// Config tunes the decision core. The zero value of every field selects the default in
// the comment, so Config{} is a working configuration.
type Config struct {
	// Lanes configures lanes by name; "BACKEND/*" configures every model of a backend
	// not listed by its full name. A lane not listed uses DefaultLane, whose Fallback is
	// ignored (a fallback is named per lane).
	Lanes       map[string]LaneConfig
	DefaultLane LaneConfig

	// SuspendAfter is the longest wait a run sits out inside the scheduler; a longer
	// wait suspends the run (SPEC §7). Default 2 min.
	SuspendAfter time.Duration

	// BatchOffset is how much later than an interactive turn a batch turn counts as
	// having arrived. It is the whole of class priority: interactive work goes first,
	// and a batch turn that has waited BatchOffset competes as if it were interactive,
	// so batch never starves. Default 5 min.
	BatchOffset time.Duration

	// ContinuationLead ranks continuations ahead of new work of their class: a
	// continuation counts as having arrived ContinuationLead before its agent call
	// was first admitted (Turn.CallStart), plus its run's age then up to another
	// ContinuationLead, so a tool follow-up goes ahead of its siblings' first turns
	// and the continuations of older runs go first (program-level ordering, as in
	// Continuum and Autellix). Keep it well below BatchOffset.
	// Default 10 s.
	ContinuationLead time.Duration

	// AffinityBound is how many more running turns than the least-loaded replica a
	// run's previous replica may carry and still get the run's next turn. Default 2;
	// negative disables affinity.
	AffinityBound int

	// AffinityWindow is how much worse a batch turn's rank may be than the best
	// turn's and still take a freed slot in its place, when the best turn's run last
	// ran on another replica (that cannot take it now) and this turn's run last ran on
	// the freed one: the best turn then waits for its own replica's next free slot.
	// It trades a bounded reordering within a caller's batch work for KV-cache hits.
	// Default 5 s; negative disables it.
	AffinityWindow time.Duration

	// Estimation and margins (see estimator).
	SafetyK        float64       // σ multiplier; default 2
	Quantile       float64       // residual quantile; default 0.95
	MinSamples     int           // completions before the learned margin is used; default 8
	FallbackSpread float64       // spread as a fraction of the estimate before then; default 0.27
	MarginBump     float64       // margin added per 429, in spreads; default 1
	MarginBumpMax  float64       // cap of the accumulated bump; default 4
	MarginHalfLife time.Duration // the bump halves this often; default 5 min
	RefuseFraction float64       // a turn needing more than this share of a bucket is refused; default 0.98
	// OutputQuantile is the quantile of a lane's recent completion lengths that a turn
	// without an output cap (Turn.EstOutput 0) reserves for its output, times
	// OutputHeadroom; defaults 0.99, which over the 64 completions kept is their
	// largest, and 1.5, because the largest of 64 draws of a heavy tail is often beaten
	// by the next few hundred, while a reserve that is too large only holds the next
	// turn back until this one ends.
	OutputQuantile float64
	OutputHeadroom float64

	// InteractiveHeadroom is the share of each known bucket that batch turns leave
	// unused for interactive ones. Default 0.1; negative disables it.
	InteractiveHeadroom float64

	// InteractiveSlots is how many of a lane's slots batch turns leave free while
	// interactive work is about: an interactive turn started or ended on the lane within
	// the last InteractiveLinger (its run is likely in a tool pause and coming back). It
	// keeps an interactive turn from waiting for a batch turn to end. Defaults 1 and 3 s
	// (W1 of bench/sched: interactive p99 2.03× → 1.79× isolation, batch makespan
	// 1.005× → 1.031× FIFO; 5 s cost 1.075×); negative disables it. Lanes without a slot
	// limit are unaffected, and a lane keeps at least one slot for batch work.
	InteractiveSlots  int
	InteractiveLinger time.Duration

	// Retries.
	MaxRetries      int           // retries after 5xx/network errors; default 3
	MaxRateRetries  int           // retries after 429s; default 8
	BackoffBase     time.Duration // first 5xx backoff; default 1 s
	BackoffMax      time.Duration // backoff cap; default 60 s
	Jitter          float64       // backoff jitter fraction (±); default 0.25
	RateLimitBackup time.Duration // pause after a 429 that names no time; default 1 s

	// Circuit breaker per lane.
	BreakerThreshold int           // consecutive failures that open it; default 5
	BreakerCooldown  time.Duration // open time before the half-open probe; default 30 s

	// RunIdleTTL is how long the core remembers a run with no turns in it (its start
	// for ranking continuations, its replica for affinity). Default 30 min.
	RunIdleTTL time.Duration

	// Seed seeds the deterministic jitter source; equal seeds give equal decisions.
	Seed uint64
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	deff := func(f *float64, v float64) {
		if *f == 0 {
			*f = v
		}
	}
	defi := func(i *int, v int) {
		if *i == 0 {
			*i = v
		}
	}
	def(&c.SuspendAfter, 2*time.Minute)
	def(&c.BatchOffset, 5*time.Minute)
	def(&c.ContinuationLead, 10*time.Second)
	defi(&c.AffinityBound, 2)
	def(&c.AffinityWindow, 5*time.Second)
	deff(&c.SafetyK, 2)
	deff(&c.Quantile, 0.95)
	defi(&c.MinSamples, 8)
	deff(&c.FallbackSpread, 0.27)
	deff(&c.MarginBump, 1)
	deff(&c.MarginBumpMax, 4)
	def(&c.MarginHalfLife, 5*time.Minute)
	deff(&c.RefuseFraction, 0.98)
	deff(&c.OutputQuantile, 0.99)
	deff(&c.OutputHeadroom, 1.5)
	deff(&c.InteractiveHeadroom, 0.1)
	c.InteractiveHeadroom = max(c.InteractiveHeadroom, 0)
	defi(&c.InteractiveSlots, 1)
	c.InteractiveSlots = max(c.InteractiveSlots, 0)
	def(&c.InteractiveLinger, 3*time.Second)
	defi(&c.MaxRetries, 3)
	defi(&c.MaxRateRetries, 8)
	def(&c.BackoffBase, time.Second)
	def(&c.BackoffMax, 60*time.Second)
	deff(&c.Jitter, 0.25)
	def(&c.RateLimitBackup, time.Second)
	defi(&c.BreakerThreshold, 5)
	def(&c.BreakerCooldown, 30*time.Second)
	def(&c.RunIdleTTL, 30*time.Minute)
	return c
}
