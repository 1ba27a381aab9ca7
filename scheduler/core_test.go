package scheduler

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/agent"
)

const testLane = "fake/m"

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// job builds a Job: run r, caller c, class "i" or "b", est tokens.
func mkJob(id TurnID, run, caller, class string, est int) Job {
	cl := agent.ClassInteractive
	if class == "b" {
		cl = agent.ClassBatch
	}
	return Job{ID: id, Turn: Turn{RunID: run, Caller: caller, Lane: testLane, Class: cl, EstTokens: est}}
}

func cont(j Job) Job { j.Continuation = true; return j }

// ids lists the ids of the actions of kind k.
func ids(acts []Action, k ActionKind) []TurnID {
	var out []TurnID
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a.ID)
		}
	}
	return out
}

func find(acts []Action, k ActionKind) (Action, bool) {
	for _, a := range acts {
		if a.Kind == k {
			return a, true
		}
	}
	return Action{}, false
}

func dump(acts []Action) string {
	var b strings.Builder
	for _, a := range acts {
		fmt.Fprintf(&b, "\n  %s", a)
	}
	return b.String()
}

func oneSlot(cfg Config) *Core {
	if cfg.Lanes == nil {
		cfg.Lanes = map[string]LaneConfig{}
	}
	if _, ok := cfg.Lanes[testLane]; !ok {
		cfg.Lanes[testLane] = LaneConfig{Slots: 1}
	}
	return NewCore(cfg)
}

func ok(n int) Result { return Result{Status: StatusOK, Usage: agent.Usage{Input: n}} }

// drain completes the running turn each time and records the admission order.
func drain(c *Core, first TurnID, at time.Time) []TurnID {
	var order []TurnID
	running := first
	for i := 0; i < 100; i++ {
		acts := c.Complete(running, ok(100), at)
		a := ids(acts, ActAdmit)
		if len(a) == 0 {
			break
		}
		order = append(order, a...)
		running = a[0]
	}
	return order
}

func TestOrdering(t *testing.T) {
	tests := []struct {
		name   string
		submit []Job // the first one takes the only slot
		want   []TurnID
	}{
		{
			name: "interactive before batch",
			submit: []Job{
				mkJob(1, "x", "u", "i", 100),
				mkJob(2, "b1", "u", "b", 100),
				mkJob(3, "b2", "u", "b", 100),
				mkJob(4, "i1", "u", "i", 100),
				mkJob(5, "i2", "u", "i", 100),
			},
			want: []TurnID{4, 5, 2, 3},
		},
		{
			name: "interactive before batch across callers, whatever their counters",
			submit: []Job{
				mkJob(1, "x", "heavy", "i", 50000), // heavy's counter is far ahead
				mkJob(2, "b1", "light", "b", 100),
				mkJob(3, "i1", "heavy", "i", 100),
			},
			want: []TurnID{3, 2},
		},
		{
			name: "continuation ahead of new work of its class",
			submit: []Job{
				mkJob(1, "x", "u", "i", 100),
				mkJob(2, "new", "u", "i", 100),
				cont(mkJob(3, "old", "u", "i", 100)),
			},
			want: []TurnID{3, 2},
		},
		{
			name: "batch continuation ahead of new batch, behind interactive",
			submit: []Job{
				mkJob(1, "x", "u", "i", 100),
				mkJob(2, "newb", "u", "b", 100),
				cont(mkJob(3, "oldb", "u", "b", 100)),
				mkJob(4, "newi", "u", "i", 100),
			},
			want: []TurnID{4, 3, 2},
		},
		{
			name: "FIFO within a class and kind",
			submit: []Job{
				mkJob(1, "x", "u", "b", 100),
				mkJob(2, "a", "u", "b", 100),
				mkJob(3, "b", "u", "b", 100),
				mkJob(4, "c", "u", "b", 100),
			},
			want: []TurnID{2, 3, 4},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := oneSlot(Config{})
			for i, j := range tt.submit {
				acts := c.Submit(j, sec(float64(i)))
				if got := ids(acts, ActAdmit); i == 0 && !slices.Equal(got, []TurnID{j.ID}) {
					t.Fatalf("first submit admitted %v", got)
				} else if i > 0 && len(got) > 0 {
					t.Fatalf("submit %d admitted %v with the slot taken", j.ID, got)
				}
			}
			got := drain(c, tt.submit[0].ID, sec(10))
			if !slices.Equal(got, tt.want) {
				t.Fatalf("admission order %v, want %v", got, tt.want)
			}
		})
	}
}

func TestContinuationRankedByRunAge(t *testing.T) {
	c := oneSlot(Config{})
	c.Submit(mkJob(1, "x", "u", "i", 100), sec(0))
	young := cont(mkJob(2, "young", "u", "i", 100))
	young.RunStart = sec(-2)
	old := cont(mkJob(3, "old", "u", "i", 100))
	old.RunStart = sec(-8)
	c.Submit(young, sec(1))
	c.Submit(old, sec(2))
	// New work that has waited longer than ContinuationLead goes first.
	stale := mkJob(4, "stale", "u", "i", 100)
	stale.Arrival = sec(-30)
	c.Submit(stale, sec(3))
	if got := drain(c, 1, sec(5)); !slices.Equal(got, []TurnID{4, 3, 2}) {
		t.Fatalf("order %v, want [4 3 2]", got)
	}
}

// A stream of interactive turns keeps the only slot busy; a batch turn still gets in
// once it has waited BatchOffset, and never with ageing switched off in effect.
func TestAgeingPreventsStarvation(t *testing.T) {
	for _, tt := range []struct {
		offset  time.Duration
		maxWait time.Duration // 0 = must starve for the whole test
	}{
		{offset: 60 * time.Second, maxWait: 80 * time.Second},
		{offset: 24 * time.Hour},
	} {
		t.Run(tt.offset.String(), func(t *testing.T) {
			c := oneSlot(Config{BatchOffset: tt.offset})
			c.Submit(mkJob(1, "i0", "u", "i", 100), sec(0))
			c.Submit(mkJob(2, "batch", "u", "b", 100), sec(0))
			c.Submit(mkJob(3, "i1", "u", "i", 100), sec(0))
			running, next := TurnID(1), TurnID(4)
			var batchAt time.Duration = -1
			for s := 10; s <= 600; s += 10 {
				now := sec(float64(s))
				acts := c.Complete(running, ok(100), now)
				a := ids(acts, ActAdmit)
				if len(a) != 1 {
					t.Fatalf("t=%ds: admitted %v", s, a)
				}
				running = a[0]
				if running == 2 {
					batchAt = now.Sub(t0)
				}
				// A fresh interactive turn is always waiting.
				c.Submit(mkJob(next, fmt.Sprint("i", next), "u", "i", 100), now)
				next++
			}
			switch {
			case tt.maxWait == 0 && batchAt >= 0:
				t.Fatalf("batch admitted at %v without ageing", batchAt)
			case tt.maxWait > 0 && (batchAt < tt.offset || batchAt > tt.maxWait):
				t.Fatalf("batch admitted at %v, want within [%v, %v]", batchAt, tt.offset, tt.maxWait)
			}
		})
	}
}

func TestAffinityWithLoadBound(t *testing.T) {
	tests := []struct {
		name  string
		bound int
		loads [2]int // other runs' turns put on replicas 0 and 1 before the run returns
		want  int
	}{
		{name: "stays on its replica when balanced", bound: 1, loads: [2]int{1, 1}, want: 0},
		{name: "stays within the bound", bound: 1, loads: [2]int{2, 1}, want: 0},
		{name: "leaves an overloaded replica", bound: 1, loads: [2]int{3, 1}, want: 1},
		{name: "leaves a full replica", bound: 8, loads: [2]int{4, 0}, want: 1},
		{name: "affinity off goes least-loaded", bound: -1, loads: [2]int{1, 1}, want: 0},
		{name: "affinity off, imbalance", bound: -1, loads: [2]int{2, 1}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCore(Config{AffinityBound: tt.bound,
				Lanes: map[string]LaneConfig{testLane: {Slots: 4, Replicas: 2}}})
			// The run's first turn goes to the least-loaded replica, 0.
			acts := c.Submit(mkJob(1, "r", "u", "i", 100), sec(0))
			if a, _ := find(acts, ActAdmit); a.Replica != 0 {
				t.Fatalf("first turn on replica %d", a.Replica)
			}
			c.Complete(1, ok(100), sec(1))
			// Load the replicas with other runs' turns, placed directly.
			l := c.lanes[testLane]
			l.replicas[0], l.replicas[1] = tt.loads[0], tt.loads[1]
			l.running = tt.loads[0] + tt.loads[1]
			acts = c.Submit(cont(mkJob(2, "r", "u", "i", 100)), sec(2))
			a, found := find(acts, ActAdmit)
			if !found || a.Replica != tt.want {
				t.Fatalf("continuation: %s, want replica %d", dump(acts), tt.want)
			}
		})
	}
}

func TestRefuseOversize(t *testing.T) {
	tests := []struct {
		name string
		cfg  LaneConfig
		h    http.Header // telemetry learned before the turn
		est  int
		want ActionKind
	}{
		{name: "needs more than the configured window", cfg: LaneConfig{TPM: 10000}, est: 9900, want: ActRefuse},
		{name: "just fits the configured window", cfg: LaneConfig{TPM: 10000}, est: 9500, want: ActAdmit},
		{name: "needs more than the learned window", h: hdr(
			"x-ratelimit-limit-tokens", "6000", "x-ratelimit-remaining-tokens", "6000", "x-ratelimit-reset-tokens", "0s"),
			est: 7000, want: ActRefuse},
		{name: "unknown window never refuses", est: 1 << 30, want: ActAdmit},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: tt.cfg}})
			if tt.h != nil {
				c.Submit(mkJob(100, "probe", "u", "i", 10), sec(0))
				c.Complete(100, Result{Status: StatusOK, Usage: agent.Usage{Input: 10},
					Telemetry: ParseTelemetry(tt.h, sec(0))}, sec(0))
			}
			acts := c.Submit(mkJob(1, "r", "u", "i", tt.est), sec(1))
			if len(acts) == 0 || acts[0].Kind != tt.want {
				t.Fatalf("actions: %s\nwant %s", dump(acts), tt.want)
			}
			if tt.want == ActRefuse {
				if acts[0].Reason != ReasonOversize {
					t.Fatalf("reason %q", acts[0].Reason)
				}
				if _, still := c.jobs[1]; still {
					t.Fatal("a refused turn is still in the core")
				}
			}
		})
	}
}

func TestDuplicateAndUnknownIDs(t *testing.T) {
	c := oneSlot(Config{})
	c.Submit(mkJob(1, "r", "u", "i", 100), sec(0))
	acts := c.Submit(mkJob(1, "r", "u", "i", 100), sec(0))
	if a, _ := find(acts, ActRefuse); a.Reason != ReasonDuplicate {
		t.Fatalf("duplicate: %s", dump(acts))
	}
	if acts := c.Complete(99, ok(1), sec(1)); len(acts) != 0 {
		t.Fatalf("unknown id: %s", dump(acts))
	}
	if acts := c.Cancel(99, sec(1)); len(acts) != 0 {
		t.Fatalf("cancel unknown: %s", dump(acts))
	}
}

func TestCancel(t *testing.T) {
	c := oneSlot(Config{})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	c.Submit(mkJob(2, "b", "u", "i", 100), sec(0))
	c.Submit(mkJob(3, "c", "u", "i", 100), sec(0))
	if acts := c.Cancel(2, sec(1)); len(acts) != 0 {
		t.Fatalf("cancel queued: %s", dump(acts))
	}
	// Canceling the running turn frees its slot for 3.
	if got := ids(c.Cancel(1, sec(2)), ActAdmit); !slices.Equal(got, []TurnID{3}) {
		t.Fatalf("after cancel admitted %v", got)
	}
	if s := c.Stats(sec(2))[0]; s.QueuedInteractive != 0 || s.Running != 1 || len(c.jobs) != 1 {
		t.Fatalf("stats %+v, jobs %d", s, len(c.jobs))
	}
}

// Runs are remembered while idle for RunIdleTTL, then forgotten.
func TestRunsForgottenWhenIdle(t *testing.T) {
	c := oneSlot(Config{RunIdleTTL: time.Minute})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	c.Complete(1, ok(100), sec(1))
	c.Tick(sec(30))
	if c.runs["a"] == nil {
		t.Fatal("run forgotten too early")
	}
	c.Tick(sec(62))
	if len(c.runs) != 0 || len(c.idle) != 0 {
		t.Fatalf("runs %d idle %d", len(c.runs), len(c.idle))
	}
}

// A suspended run is remembered for as long as its suspension lasts, even past
// RunIdleTTL, so that a late turn of it is suspended too.
func TestSuspendedRunOutlivesIdleTTL(t *testing.T) {
	c := NewCore(Config{RunIdleTTL: time.Minute})
	c.Submit(mkJob(1, "a", "u", "i", 100), sec(0))
	c.Complete(1, rateLimited(map[string]string{"retry-after": "600"}, sec(1)), sec(1))
	if c.runs["a"] == nil || !c.runs["a"].suspended.Equal(sec(601)) {
		t.Fatal("run a not suspended")
	}
	c.Tick(sec(200))
	if acts := c.Submit(mkJob(2, "a", "u", "i", 100), sec(201)); acts[0].Kind != ActSuspend {
		t.Fatalf("late turn: %s", dump(acts))
	}
	c.Tick(sec(700))
	if len(c.runs) != 0 {
		t.Fatalf("%d runs remembered after the suspension and the TTL", len(c.runs))
	}
}

// A continuation ranks by when its agent call first asked to run, not by its own
// arrival: a tool follow-up that arrives after its siblings' first turns queued still
// goes ahead of them, while one of a call that started after them does not.
func TestContinuationRankedByCallStart(t *testing.T) {
	c := oneSlot(Config{ContinuationLead: time.Second})
	c.Submit(mkJob(1, "r", "u", "i", 100), sec(0)) // takes the slot
	c.Submit(mkJob(2, "r", "u", "i", 100), sec(1)) // sibling first turns
	c.Submit(mkJob(3, "r", "u", "i", 100), sec(1))
	early := cont(mkJob(4, "r", "u", "i", 100))
	early.CallStart = sec(0) // its call began before the siblings queued
	c.Submit(early, sec(30))
	late := cont(mkJob(5, "r", "u", "i", 100))
	late.CallStart = sec(20) // its call began long after them
	c.Submit(late, sec(31))
	if got := drain(c, 1, sec(40)); !slices.Equal(got, []TurnID{4, 2, 3, 5}) {
		t.Fatalf("order %v, want [4 2 3 5]", got)
	}
}

// Affinity follows the conversation, not the run: two calls of one run that ran on
// different replicas each go back to their own.
func TestAffinityFollowsTheConversation(t *testing.T) {
	c := NewCore(Config{Lanes: map[string]LaneConfig{testLane: {Slots: 2, Replicas: 2}}})
	conv := func(id TurnID, name string) Job {
		j := mkJob(id, "run", "u", "i", 100)
		j.Conversation = name
		return j
	}
	admitted := func(acts []Action) Action {
		t.Helper()
		for _, a := range acts {
			if a.Kind == ActAdmit {
				return a
			}
		}
		t.Fatalf("nothing admitted:%s", dump(acts))
		return Action{}
	}
	a1 := admitted(c.Submit(conv(1, "a"), sec(0)))
	b1 := admitted(c.Submit(conv(2, "b"), sec(0)))
	if a1.Replica == b1.Replica {
		t.Fatalf("first turns on one replica: %v %v", a1, b1)
	}
	c.Complete(1, ok(100), sec(1))
	c.Complete(2, ok(100), sec(1))
	// b's turn asks first: with per-run affinity it would follow the run's last replica.
	b2 := admitted(c.Submit(cont(conv(3, "b")), sec(2)))
	a2 := admitted(c.Submit(cont(conv(4, "a")), sec(2)))
	if a2.Replica != a1.Replica || b2.Replica != b1.Replica {
		t.Fatalf("a on %d then %d, b on %d then %d: want each conversation on its own replica",
			a1.Replica, a2.Replica, b1.Replica, b2.Replica)
	}
}

// While interactive work is about (an interactive turn started or ended within
// InteractiveLinger), batch turns leave the lane's last slot free, so the interactive
// run's next turn does not wait for a batch turn to end; once it has been quiet that
// long, or on a lane that never saw interactive work, batch takes every slot.
func TestBatchLeavesASlotForInteractiveWork(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         Config
		interactive bool
		want        []TurnID // batch turns admitted at 1 s
	}{
		{"interactive work about", Config{}, true, []TurnID{2, 3}},
		{"no interactive work", Config{}, false, []TurnID{2, 3, 4}},
		{"reserve disabled", Config{InteractiveSlots: -1}, true, []TurnID{2, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Lanes = map[string]LaneConfig{testLane: {Slots: 3}}
			c := NewCore(tc.cfg)
			if tc.interactive {
				c.Submit(mkJob(1, "i", "user", "i", 100), sec(0))
				c.Complete(1, Result{Status: StatusOK}, sec(0.5)) // its run is in a tool pause
			}
			var got []TurnID
			for id := TurnID(2); id <= 4; id++ {
				got = append(got, ids(c.Submit(mkJob(id, fmt.Sprint("b", id), "batch", "b", 100), sec(1)), ActAdmit)...)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("admitted %v at 1 s, want %v", got, tc.want)
			}
			if !tc.interactive || tc.cfg.InteractiveSlots < 0 {
				return
			}
			// Quiet for 3 s at 3.5 s: the held slot goes to batch.
			if w := c.NextWake(sec(1)); !w.Equal(sec(3.5)) {
				t.Fatalf("next wake %v, want 3.5 s", w.Sub(t0))
			}
			if got := ids(c.Tick(sec(3.5)), ActAdmit); !slices.Equal(got, []TurnID{4}) {
				t.Fatalf("admitted %v at 3.5 s, want [4]", got)
			}
		})
	}
}
