package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/storage"
)

const (
	runs  = 200
	steps = 20
	// lease is short, so takeovers come soon, and long enough that a live node keeps
	// renewing it on a 2-core machine loaded far past its cores (at a load of 15, a 2 s
	// lease lapsed under live nodes now and then, and their calls in flight were sent
	// again by the nodes that took their runs).
	lease     = 3 * time.Second
	heartbeat = 200 * time.Millisecond
	latency   = 50 * time.Millisecond // each call's time at the engine
	// budget is the shared key's requests per period (150/s, a burst of 1,500): nodes
	// that do not share it meet ~4,000 × 429 here. The workload's demand on a shared
	// 2-core machine (100-180/s) rarely drains it, so the test logs whether and when the
	// key ran nearly dry. At 300 per 2 s (the same rate, a burst of 300) the key bound
	// the test, the three sharing nodes got only ~95 requests/s and the test took up to
	// 52 s: the shared budget's cost under such load is not solved yet.
	budget = 1500
	period = 10 * time.Second
	// killEvery is the time between SIGKILLs; the SIGSTOP falls between two of them and
	// lasts stopFor, past the lease.
	killEvery = 5 * time.Second
	stopFor   = lease + lease/2
	// sharedBudget makes "0 × 429 on the shared key" an assertion: the nodes share one
	// budget per key through PostgreSQL. Without it (each node keeping its own buckets)
	// the test only reports the 429s.
	sharedBudget = true
)

// workflow calls steps agents one after another and reports what each answered; the
// prompt names the run (args.k) and the step, so the engine's log says which call a
// request was for.
const workflow = `function main()
  local texts = {}
  for i = 1, %d do
    local r = agent{prompt = "run " .. args.k .. " step " .. i}
    texts[i] = r.ok and r.text or ("failed: " .. tostring(r.error))
  end
  report({k = args.k, texts = texts})
end`

var promptRE = regexp.MustCompile(`^run (\d+) step (\d+)$`)

// call is one agent call of the workload: run k (from 1), step i (from 1).
type call struct{ k, i int }

// fault is one SIGKILL or SIGSTOP of a daemon process.
type fault struct {
	kind  string // "kill" or "stop"
	p     *proc
	at    time.Time
	cont  time.Time       // a stop's SIGCONT
	owned map[string]int  // the runs its node held then: id → attempt
	took  []time.Duration // from the fault to the claim of each of them
}

// Three luft daemons on one PostgreSQL database and one rate-limited key of the fake
// engine drive 200 runs of 20 calls while a daemon is SIGKILLed every 5 s (a new one on
// a fresh state dir takes its place) and another is SIGSTOPped past its lease and woken.
// From the database and the engine's log: every run completes with the report an
// undisturbed run gives, no finished call is sent or journaled again, no write lands from
// a process after it lost a run, the key sees no 429 (with the shared budget), runs are
// taken over within the lease + 2 s (median), and the calls sent twice are no more than
// the calls in flight at the faults.
func TestChaos(t *testing.T) {
	dbURL := pgtest.URL(t)
	bin := buildLuft(t)
	ctx := t.Context()
	st, err := storage.OpenURL(ctx, withParam(t, dbURL, "application_name", "chaos_test"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	audit := openAudit(t, dbURL)

	key := startKey(t, testkit.Config{Slots: 256, PrefillOverhead: latency, DefaultMaxTokens: 8, KeepRequests: true,
		Limits: testkit.Limits{RPM: budget, Period: period}})
	c := &cluster{t: t, bin: bin, dbURL: dbURL, key: key, base: t.TempDir(), config: fmt.Sprintf(`default_backend = "fake"
[backends.fake]
type = "openai"
base_url = %q
model = "luft-fake"
max_concurrency = 16
[node]
lease = %q
heartbeat = %q
`, key.url, lease, heartbeat)}
	t.Cleanup(c.stopAll)
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("daemon %s (node %s, pid %d):%s", p.name, p.node, p.pid, c.tail(p))
			}
		}
	})

	began := time.Now()
	live := []*proc{c.start(), c.start(), c.start()}
	script := fmt.Sprintf(workflow, steps)
	ids := make([]string, runs) // run k's id at ids[k-1]
	{
		var wg sync.WaitGroup
		errs := make(chan error, runs)
		for k := 1; k <= runs; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, err := c.submit(ctx, live[k%len(live)], script, map[string]int{"k": k})
				ids[k-1] = id
				if err != nil {
					errs <- fmt.Errorf("start run %d: %w", k, err)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	t.Logf("%d runs started on 3 daemons in %v", runs, time.Since(began).Round(time.Millisecond))

	// Faults until every run has ended.
	var faults []*fault
	done := func() bool {
		list, err := st.ListRuns(context.Background(), storage.ListOptions{Limit: runs + 10})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range list {
			if r.Status == storage.StatusCompleted || r.Status == storage.StatusFailed || r.Status == storage.StatusCancelled {
				n++
			}
		}
		return n == runs
	}
	owned := func(p *proc) map[string]int {
		list, err := st.ListRuns(context.Background(), storage.ListOptions{Limit: runs + 10})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range list {
			if r.Status == storage.StatusRunning && r.Node == p.node {
				out[r.ID] = r.Attempt
			}
		}
		return out
	}
	deadline := began.Add(120 * time.Second)
	nextKill := time.Now().Add(killEvery)
	var stopAt time.Time // half way from the first kill to the next
	var stopped *fault
	var woken chan time.Time
	victim := 0
	for !done() {
		if stopped != nil && stopped.cont.IsZero() {
			select {
			case stopped.cont = <-woken:
			default:
			}
		}
		now := time.Now()
		if now.After(deadline) {
			t.Fatalf("runs still unfinished after %v", now.Sub(began))
		}
		switch {
		case stopped == nil && !stopAt.IsZero() && now.After(stopAt):
			// SIGSTOP a daemon past its lease, then SIGCONT it: a zombie that wakes to
			// find its runs taken over. The SIGCONT comes on its own timer, not after a
			// replacement daemon's start.
			p := live[(victim+1)%len(live)]
			// What it holds is read once it is stopped (or dead, below): it changes
			// nothing after.
			f := &fault{kind: "stop", p: p}
			f.at = c.signal(p, syscall.SIGSTOP)
			f.owned = owned(p)
			faults = append(faults, f)
			stopped = f
			woken = make(chan time.Time, 1)
			time.AfterFunc(stopFor, func() {
				_ = syscall.Kill(p.pid, syscall.SIGCONT)
				woken <- time.Now()
			})
		case now.After(nextKill):
			i := victim % len(live)
			if stopped != nil && stopped.cont.IsZero() && live[i] == stopped.p {
				i = (i + 1) % len(live)
			}
			p := live[i]
			f := &fault{kind: "kill", p: p}
			f.at = c.kill(p)
			f.owned = owned(p)
			faults = append(faults, f)
			live[i] = c.start()
			victim++
			nextKill = f.at.Add(killEvery)
			if stopAt.IsZero() {
				stopAt = f.at.Add(killEvery / 2)
			}
		}
		time.Sleep(20 * time.Millisecond) // polling external processes and the database
	}
	wall := time.Since(began)
	if stopped != nil && stopped.cont.IsZero() {
		stopped.cont = <-woken
	}
	if stopped == nil {
		t.Fatalf("the runs ended %v after the start, before the SIGSTOP: the workload is too short for the faults", wall)
	}
	// The woken process renews its lease once more, finds its runs lost and stops them:
	// after that it has had every chance to write.
	waitRenewal(t, audit, stopped.p, stopped.cont)
	check(t, st, audit, key, ids, faults, wall)
}

// waitRenewal waits until p's node renewed its lease after since (or p is gone).
func waitRenewal(t *testing.T, db *sql.DB, p *proc, since time.Time) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		select {
		case <-p.exited:
			return
		default:
		}
		var hb string
		if err := db.QueryRowContext(context.Background(), `SELECT heartbeat_at FROM nodes WHERE id = $1`, p.node).Scan(&hb); err != nil {
			t.Fatal(err)
		}
		if at, err := time.Parse(time.RFC3339Nano, hb); err == nil && at.After(since) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s (%s) did not renew its lease within 10 s of its SIGCONT (last heartbeat %s)", p.node, p.name, hb)
		}
		time.Sleep(20 * time.Millisecond) // polling the database
	}
}

// check judges the chaos from the database and the engine's log.
func check(t *testing.T, st storage.DB, audit *sql.DB, key *fakeKey, ids []string, faults []*fault, wall time.Duration) {
	ctx := context.Background()
	log := key.engine.Log()
	// A request the engine read after its sender died names no live process ("unknown":
	// every daemon is known before it sends anything). It was sent before that death:
	// it is the last killed process's, sent just before its kill.
	for i := range log {
		if log[i].Caller != "unknown" {
			continue
		}
		for _, f := range slices.Backward(faults) {
			if f.kind == "kill" && !f.at.After(log[i].Arrival) {
				log[i].Caller, log[i].Arrival = f.p.name, f.at.Add(-time.Nanosecond)
				break
			}
		}
	}
	byCall := map[call][]testkit.Record{}
	var template *testkit.Record
	for i := range log {
		r := &log[i]
		c, ok := callOf(r)
		if !ok {
			t.Errorf("engine request %s is for no call of the workload: %+v", r.ID, r.Messages)
			continue
		}
		byCall[c] = append(byCall[c], *r)
		if template == nil {
			template = r
		}
	}
	if template == nil {
		t.Fatal("the engine got no request")
	}

	// Every run completes with the report an undisturbed run gives: the engine's answer
	// is a function of the request alone, so a fresh engine answers each call's request
	// (the first request's shape with the call's prompt) as an undisturbed run is answered.
	fresh := testkit.NewEngine(testkit.Config{DefaultMaxTokens: key.engine.Config().DefaultMaxTokens})
	id2k := map[string]int{}
	for k := 1; k <= runs; k++ {
		id := ids[k-1]
		id2k[id] = k
		r, err := st.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != storage.StatusCompleted {
			t.Errorf("run %d (%s): %s: %s", k, id, r.Status, r.Error)
			continue
		}
		var got struct {
			K     int      `json:"k"`
			Texts []string `json:"texts"`
		}
		if err := json.Unmarshal(r.Report, &got); err != nil {
			t.Errorf("run %d: report %s: %v", k, r.Report, err)
			continue
		}
		want := make([]string, steps)
		for i := range want {
			want[i] = answer(t, fresh, template, call{k, i + 1})
		}
		if got.K != k || !slices.Equal(got.Texts, want) {
			t.Errorf("run %d: report %s, want k %d and texts %q", k, r.Report, k, want)
		}
	}

	// 0 finished calls redone, in the journal: each call's entry is completed once, and
	// never written over once completed. Calls run one after another, so a run's entries
	// in completion order are its steps.
	fins := finishes(t, audit)
	first := map[call]finish{}
	perKey := map[[2]string]int{}
	redoneJournal := 0
	for _, f := range fins {
		perKey[[2]string{f.run, f.key}]++
		if f.prev == string(storage.EntryCompleted) || perKey[[2]string{f.run, f.key}] > 1 {
			redoneJournal++
			t.Errorf("run %s: call %s completed again by %s at attempt %d (it was %q)", f.run, f.key, f.writer, f.attempt, f.prev)
		}
	}
	for k := 1; k <= runs; k++ {
		j, err := st.Journal(ctx, ids[k-1])
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(j, func(a, b storage.Entry) int { return int(a.CompletedSeq - b.CompletedSeq) })
		n := 0
		for _, e := range j {
			if e.Status != storage.EntryCompleted {
				continue
			}
			n++
			for _, f := range fins {
				if f.run == ids[k-1] && f.key == e.CallKey {
					first[call{k, n}] = f
					break
				}
			}
		}
		if n != steps {
			t.Errorf("run %d: %d completed journal entries, want %d", k, n, steps)
		}
	}

	// 0 finished calls redone, at the provider: no request for a call arrived after its
	// answer was journaled (the journal's write, timed by the database's clock, precedes
	// its commit; a node reads the entry only after the commit).
	redoneEngine := 0
	for c, recs := range byCall {
		f, ok := first[c]
		if !ok {
			continue
		}
		for _, r := range recs {
			if r.Arrival.After(f.at) {
				redoneEngine++
				t.Errorf("call %v: request %s from %s arrived %v after its answer was journaled by %s",
					c, r.ID, r.Caller, r.Arrival.Sub(f.at), f.writer)
			}
		}
	}

	// 0 writes from a process after it lost a run.
	stale := staleWrites(t, audit)
	for _, s := range stale {
		t.Errorf("stale write: %s wrote %s of run %s (%s) at %s while attempt %d was %s's",
			s.writer, s.tbl, s.run, s.what, s.at.Format("15:04:05.000"), s.attempt, s.owner)
	}

	// 0 × 429 on the shared key.
	limited := 0
	for _, r := range log {
		if r.Status == 429 {
			limited++
		}
	}

	// Takeover: from the fault to the claim of each run the faulted node held.
	cl := claims(t, audit)
	var took []time.Duration
	reclaimed := 0
	for _, f := range faults {
		for id, a := range f.owned {
			i := slices.IndexFunc(cl, func(c claim) bool {
				return c.run == id && (c.attempt > a || c.attempt == a && c.kind == "settle" && c.at.After(f.at))
			})
			if i < 0 {
				t.Errorf("run %s, held by %s at its %s, was never claimed again", id, f.p.name, f.kind)
				continue
			}
			if cl[i].writer == f.p.name {
				// No other node took the run before the stopped one woke: it claims the
				// lapsed run back itself. That is no takeover by another node.
				reclaimed++
				continue
			}
			took = append(took, cl[i].at.Sub(f.at))
			f.took = append(f.took, cl[i].at.Sub(f.at))
		}
	}
	slices.Sort(took)
	// False takeovers: a claim of a run from a process that was neither killed nor
	// stopped by then (its lease lapsed while it lived).
	owner := map[[2]any]string{}
	for _, x := range cl {
		if x.kind == "claim" {
			owner[[2]any{x.run, x.attempt}] = x.writer
		}
	}
	falseTakeovers := 0
	for _, x := range cl {
		prev, ok := owner[[2]any{x.run, x.attempt - 1}]
		if x.kind != "claim" || x.attempt == 1 || !ok {
			continue
		}
		if !slices.ContainsFunc(faults, func(f *fault) bool { return f.p.name == prev && !f.at.After(x.at) }) {
			falseTakeovers++
			t.Logf("false takeover: run %s attempt %d claimed by %s at %s from %s, which was neither killed nor stopped",
				x.run, x.attempt, x.writer, x.at.Format("15:04:05.000"), prev)
		}
	}

	// Duplicates: requests the engine took (not refused with a 429) beyond the first for a
	// call, against the calls in flight at the faults: a call the faulted process had
	// sent before the fault and not journaled by then.
	dups, inflight, unexplained := 0, 0, 0
	// What a process sent before its fault the engine may read after it: every request
	// of a killed process was sent before its death, and a stopped one's that arrived
	// before its SIGCONT were sent before its SIGSTOP.
	sentBefore := func(r testkit.Record, f *fault) bool {
		return r.Caller == f.p.name && (f.kind == "kill" || r.Arrival.Before(f.cont))
	}
	for _, f := range faults {
		for c, recs := range byCall {
			for _, r := range recs {
				if r.Status != 429 && sentBefore(r, f) && first[c].at.After(f.at) {
					inflight++
					break
				}
			}
		}
	}
	for c, recs := range byCall {
		var taken []testkit.Record
		for _, r := range recs {
			if r.Status != 429 {
				taken = append(taken, r)
			}
		}
		if len(taken) < 2 {
			continue
		}
		dups += len(taken) - 1
		for _, r := range taken[:len(taken)-1] {
			explained := slices.ContainsFunc(faults, func(f *fault) bool {
				return sentBefore(r, f) && first[c].at.After(f.at)
			})
			if !explained {
				unexplained++
				var b strings.Builder
				for _, r := range recs {
					fmt.Fprintf(&b, "\n\trequest %s from %s: %s–%s status %d", r.ID, r.Caller, r.Arrival.Format("15:04:05.000"), r.Finish.Format("15:04:05.000"), r.Status)
				}
				for _, x := range cl {
					if x.run == ids[c.k-1] {
						fmt.Fprintf(&b, "\n\tclaim of attempt %d by %s at %s", x.attempt, x.writer, x.at.Format("15:04:05.000"))
					}
				}
				fmt.Fprintf(&b, "\n\tjournaled by %s at attempt %d at %s", first[c].writer, first[c].attempt, first[c].at.Format("15:04:05.000"))
				t.Logf("call %v: request %s from %s was sent again, and no fault of its sender had it in flight:%s", c, r.ID, r.Caller, b.String())
			}
		}
	}

	kills := 0
	for _, f := range faults {
		slices.Sort(f.took)
		if len(f.took) > 0 {
			t.Logf("%s of %s (node %s) at %s, holding %d runs: taken over after %v (median), %v (max)", f.kind, f.p.name, f.p.node,
				f.at.Format("15:04:05.000"), len(f.owned), f.took[len(f.took)/2].Round(time.Millisecond), f.took[len(f.took)-1].Round(time.Millisecond))
		} else {
			t.Logf("%s of %s (node %s) at %s, holding no run", f.kind, f.p.name, f.p.node, f.at.Format("15:04:05.000"))
		}
		if f.kind == "kill" {
			kills++
		}
	}
	t.Logf("%d runs × %d calls on 3 nodes, %d SIGKILLs and 1 SIGSTOP of %v: wall time %v", runs, steps, kills,
		faults[slices.IndexFunc(faults, func(f *fault) bool { return f.kind == "stop" })].cont.Sub(
			faults[slices.IndexFunc(faults, func(f *fault) bool { return f.kind == "stop" })].at).Round(time.Millisecond),
		wall.Round(time.Millisecond))
	if len(took) > 0 {
		t.Logf("takeover of %d runs (lease %v; %d more claimed back by the woken node): p50 %v, p90 %v, max %v", len(took), lease, reclaimed,
			took[len(took)/2].Round(time.Millisecond), took[len(took)*9/10].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	}
	// The key's throughput once its burst is spent: the engine's bucket replayed from
	// its log (every request charged, as the engine charges refused ones too) says when
	// it first ran nearly dry (below a tenth of its burst: the nodes leave a margin in
	// it); from then to the last request the key allows its rate.
	recs := slices.Clone(log)
	slices.SortFunc(recs, func(a, b testkit.Record) int { return a.Arrival.Compare(b.Arrival) })
	keyRate := float64(budget) / period.Seconds()
	level, at := float64(budget), time.Time{}
	var dry, last time.Time
	keyTook := 0
	for _, r := range recs {
		if !at.IsZero() {
			level = min(float64(budget), level+keyRate*r.Arrival.Sub(at).Seconds())
		}
		at = r.Arrival
		level--
		if dry.IsZero() && level < float64(budget)/10 {
			dry = r.Arrival
		}
		if !dry.IsZero() && r.Arrival.After(dry) && r.Status != 429 {
			keyTook++
			last = r.Arrival
		}
	}
	if dry.IsZero() {
		t.Logf("the key never ran nearly dry: %d requests in %.1fs, %.1f/s of its %.0f/s", len(recs),
			recs[len(recs)-1].Arrival.Sub(recs[0].Arrival).Seconds(),
			float64(len(recs))/recs[len(recs)-1].Arrival.Sub(recs[0].Arrival).Seconds(), keyRate)
	}
	if d := last.Sub(dry).Seconds(); !dry.IsZero() && d > 0 {
		got := float64(keyTook) / d
		t.Logf("the key once nearly dry (%v after the first request): %.1f requests/s taken of its %.0f/s (%.0f%%) over %.1fs",
			dry.Sub(recs[0].Arrival).Round(time.Millisecond), got, keyRate, 100*got/keyRate, d)
	}
	t.Logf("engine: %d requests, %d × 429; duplicates %d (calls in flight at the faults %d, unexplained %d); redone: %d in the journal, %d at the engine; stale writes %d; false takeovers %d",
		len(log), limited, dups, inflight, unexplained, redoneJournal, redoneEngine, len(stale), falseTakeovers)

	if len(took) == 0 {
		t.Error("no run was taken over: the faults hit nodes that held none")
	} else if p50 := took[len(took)/2]; p50 > lease+2*time.Second {
		t.Errorf("takeover p50 %v, want ≤ lease + 2 s = %v", p50, lease+2*time.Second)
	}
	if dups > inflight {
		t.Errorf("%d duplicate provider requests, more than the %d calls in flight at the faults", dups, inflight)
	}
	if unexplained > 0 {
		// A false takeover (a live node's lease lapsed under a load far past the cores)
		// sends the calls that node had in flight again: the bound above counts them, and
		// so do the figures, but they are no fault the test made.
		t.Logf("%d provider requests were sent again though no fault of their sender had them in flight (logged above; %d false takeovers)", unexplained, falseTakeovers)
	}
	if limited > 0 {
		if sharedBudget {
			t.Errorf("the shared key answered %d × 429", limited)
		} else {
			t.Logf("the shared key answered %d × 429 (not yet an error: the nodes do not share a budget; see sharedBudget)", limited)
		}
	}
	if wall > 50*time.Second {
		t.Errorf("wall time %v, want well under a minute", wall)
	}
}

// callOf is the call a request was for, from its last user message.
func callOf(r *testkit.Record) (call, bool) {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role != "user" {
			continue
		}
		m := promptRE.FindStringSubmatch(string(r.Messages[i].Content))
		if m == nil {
			return call{}, false
		}
		k, _ := strconv.Atoi(m[1])
		i, _ := strconv.Atoi(m[2])
		return call{k, i}, true
	}
	return call{}, false
}

// answer is what a fresh engine answers to c's request: tmpl's request with c's prompt.
func answer(t *testing.T, e *testkit.Engine, tmpl *testkit.Record, c call) string {
	t.Helper()
	req := &testkit.ChatRequest{Model: tmpl.Model, Messages: slices.Clone(tmpl.Messages)}
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			req.Messages[i].Content = testkit.Content(fmt.Sprintf("run %d step %d", c.k, c.i))
			break
		}
	}
	if tmpl.MaxTokens > 0 {
		req.MaxTokens = &tmpl.MaxTokens
	}
	if tmpl.MaxCompletionTokens > 0 {
		req.MaxCompletionTokens = &tmpl.MaxCompletionTokens
	}
	res, err := e.Do(context.Background(), req)
	if err != nil || res.Response == nil {
		t.Fatalf("fresh engine, call %v: %v %+v", c, err, res)
	}
	return string(res.Response.Choices[0].Message.Content)
}
