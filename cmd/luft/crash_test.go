package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// TestCrashResume kills real luft processes with SIGKILL at random moments and resumes the
// run each time (SPEC §4: "a run killed with SIGKILL at any moment resumes with zero
// finished calls redone and no data lost"). A kill moment is "right after the k-th JSON
// event line on stdout" (k drawn from a seeded math/rand; 0 = right after the process
// started). A cycle is one run killed and resumed until a resume completes; cycles repeat
// until LUFT_CRASH_POINTS kills (default 20, 5 with -short) have happened, then the last
// cycle is resumed to completion without a kill. LUFT_CRASH_SEED replays a seed.
//
// After every kill the test reads the state dir (storage.Open) and records which agent
// calls the journal holds as completed or scheduled and the last stored event seq. When a
// cycle's run completes it checks, from the events table and the journal:
//   - no completed call ran again: an agent call completed when a process was killed never
//     gets a live agent_started afterwards (only agent_done with cached=true), and a cached
//     agent_done only replays a call completed before that process started;
//   - live invocations of a call ≤ 1 + the kills that caught it in flight, and at most one
//     per process;
//   - completed journal entries stay completed with the same result (luft.random/now too);
//   - no lost events: seq is 1..n, run_started attempts rise from 1 to the run's attempt
//     (a gap only for a process killed before it printed anything), run_done (completed)
//     is last, every line a process printed is stored unchanged at its seq, and every agent
//     call in the journal has an agent_done with status ok;
//   - each attempt's luft.random()/luft.now() values (logged by the script) are the journaled
//     ones;
//   - the report (luft status --json, and the final run_done) renders byte for byte as the
//     stdout of an uninterrupted run of the same workflow.
func TestCrashResume(t *testing.T) { crashResume(t, false) }

// TestCrashResumeOnPostgres is TestCrashResume with each state dir's runs in a PostgreSQL
// database of its own (LUFT_STORAGE_URL).
func TestCrashResumeOnPostgres(t *testing.T) {
	if ok, msg := pgtest.Available(); !ok {
		t.Skip(msg)
	}
	crashResume(t, true)
}

func crashResume(t *testing.T, pg bool) {
	t.Parallel()
	start := time.Now()
	points := 20
	if testing.Short() {
		points = 5
	}
	if s := os.Getenv("LUFT_CRASH_POINTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("LUFT_CRASH_POINTS=%q: want a whole number >= 1", s)
		}
		points = n
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("LUFT_CRASH_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("LUFT_CRASH_SEED=%q: want an integer", s)
		}
		seed = n
	}
	t.Logf("seed %d (LUFT_CRASH_SEED=%d replays these kill moments), %d kill points", seed, seed, points)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x6c756674))

	ct := &crashTest{t: t, bin: luftBinary(t), work: t.TempDir(), pg: pg, urls: map[string]string{}}
	ct.writeWorkflows()
	ref := ct.reference()
	t.Logf("reference run: %d events, %d agent calls", ref.lines, len(ref.agentKeys))

	var total crashTotals
	for cycle := 1; cycle == 1 || total.kills < points; cycle++ {
		c := ct.runCycle(cycle, rng, ref, points, &total)
		ct.verify(c, ref, &total)
		if t.Failed() {
			t.Fatalf("cycle %d failed (seed %d)", cycle, seed)
		}
	}
	t.Logf("kill points %d (%d right after start; %d times a kill caught a call in flight) over %d runs; %d processes, %d attempts; "+
		"%d live agent invocations for %d agent calls (%d cached replays); %d attempt numbers without a run_started; "+
		"%d kills after run_done was stored (%d settled by the next resume); %d kills after the run was recorded completed; wall %s",
		total.kills, total.atStart, total.inflightKills, total.cycles, total.procs, total.attempts,
		total.live, total.calls, total.cached, total.gaps, total.doneKills, total.settled, total.lateKills, time.Since(start).Round(time.Millisecond))
}

// crashWorkflow has parallel branches in three phases, journaled values and a
// sub-workflow. Its report is derived from agent outputs and counts only, so it is the same
// in every run; the random and time values go to a log line, checked against the journal.
const crashWorkflow = `
meta = {
  reasoning = "crash-resume test: fan-out, pipeline, sub-workflow, final agent",
  phases = {
    { label = "fanout", description = "12 parallel agents" },
    { label = "pipeline", description = "6 items x 2 stages" },
    { label = "final", description = "a sub-workflow and one final agent" },
  },
}

function main()
  local r = luft.random()
  local n = luft.random(1, 1000000)
  local t = luft.now()
  log("effects=" .. json.encode({ random = r, randint = n, now = t }))

  phase("fanout")
  local items = {}
  for i = 1, 12 do items[i] = i end
  local fan = parallel(items, function(i)
    local a = agent{ name = "fan " .. i, prompt = "fan-out item " .. i }
    return { text = a.output, tokens = a.tokens }
  end)

  phase("pipeline")
  local p = pipeline{
    items = { "alpha", "beta", "gamma", "delta", "epsilon", "zeta" },
    stages = {
      { label = "draft", handler = function(w)
          return agent{ name = "draft " .. w, prompt = "draft about " .. w }.output
        end },
      { label = "review", handler = function(d, w)
          return agent{ name = "review " .. w, prompt = "review of " .. w .. ": " .. d }.output
        end },
    },
  }
  local pipe = {}
  for _, it in ipairs(p.items) do pipe[#pipe + 1] = { index = it.index, ok = it.ok, output = it.output } end

  phase("final")
  local sub = workflow("lib/sub.lua", { topic = "journals" })
  local joined = {}
  for i, f in ipairs(fan) do joined[i] = f.text end
  local fin = agent{ name = "final", prompt = "combine " .. #joined .. " fan-out results, " .. p.ok ..
    " pipeline items and " .. sub.summary }
  local tokens = fin.tokens
  for _, f in ipairs(fan) do tokens = tokens + f.tokens end
  report({ fan = joined, pipeline = pipe, sub = sub, final = fin.output, tokens = tokens,
           counts = { fan = #fan, pipeline_ok = p.ok, pipeline_failed = p.failed } })
end
`

const crashSubWorkflow = `
function main()
  local a = agent{ name = "sub outline", prompt = "outline " .. args.topic }
  local b = agent{ name = "sub summary", prompt = "summarise the outline: " .. a.output }
  report({ topic = args.topic, outline = a.output, summary = b.output })
end
`

const (
	crashLatencyMS   = "15"
	crashConcurrency = "4"
	crashTimeout     = 2 * time.Minute // safety net for one luft process; never a timing device
)

type crashTest struct {
	t    *testing.T
	bin  string
	work string // holds wf.lua and lib/sub.lua; every luft process runs here
	pg   bool   // each state dir's runs are in a PostgreSQL database of its own

	mu   sync.Mutex
	urls map[string]string // state dir → its database, with pg
}

// storageURL is the database of state dir dir with pg ("" otherwise), made on first use.
func (ct *crashTest) storageURL(dir string) string {
	if !ct.pg {
		return ""
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if u, ok := ct.urls[dir]; ok {
		return u
	}
	u := pgtest.URL(ct.t)
	ct.urls[dir] = u
	return u
}

func (ct *crashTest) writeWorkflows() {
	ct.t.Helper()
	if err := os.MkdirAll(filepath.Join(ct.work, "lib"), 0o755); err != nil {
		ct.t.Fatal(err)
	}
	for name, text := range map[string]string{"wf.lua": crashWorkflow, "lib/sub.lua": crashSubWorkflow} {
		if err := os.WriteFile(filepath.Join(ct.work, name), []byte(text), 0o644); err != nil {
			ct.t.Fatal(err)
		}
	}
}

// crashRef is what the uninterrupted run gives.
type crashRef struct {
	stdout    string          // the report as luft run prints it
	lines     int             // events of the run (the length of a --json stream)
	agentKeys map[string]bool // its agent call keys
}

func (ct *crashTest) reference() crashRef {
	t := ct.t
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	p := ct.start("--state-dir", dir, "run", "-w", "wf.lua", "--max-concurrency", crashConcurrency)
	if code, signaled := p.wait(t); code != 0 || signaled {
		t.Fatalf("the reference run exited with %d (signaled %v)\nstderr:\n%s", code, signaled, p.stderrText())
	}
	ref := crashRef{stdout: p.rawText(), agentKeys: map[string]bool{}}
	st := ct.openState(dir)
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), storage.ListOptions{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("reference state: %d runs, err %v", len(runs), err)
	}
	evs, err := st.Events(context.Background(), runs[0].ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ref.lines = len(evs)
	entries, err := st.Journal(context.Background(), runs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Kind == "agent" {
			ref.agentKeys[e.CallKey] = true
		}
	}
	if !strings.HasPrefix(ref.stdout, "{") || len(ref.agentKeys) != 27 {
		t.Fatalf("unexpected reference run: %d agent calls, stdout:\n%s", len(ref.agentKeys), ref.stdout)
	}
	return ref
}

// crashKill is what the state dir held right after one SIGKILL.
type crashKill struct {
	proc      int               // index of the killed process in its cycle
	k         int               // planned kill moment: after k stdout lines (0: at start)
	seen      int               // stdout lines the process had printed
	maxSeq    int64             // the last stored event seq
	attempt   int               // the run row's attempt
	completed map[string]bool   // agent call keys completed in the journal
	scheduled map[string]bool   // agent call keys journaled as scheduled
	results   map[string]string // every completed entry (any kind): call key -> result JSON
	late      bool              // the run was already recorded completed
}

// crashCycle is one run, killed and resumed until it completed.
type crashCycle struct {
	n        int
	stateDir string
	runID    string
	procs    []*crashProc // in start order; the last one completed the run
	kills    []crashKill  // kills[i] ended procs[i]
}

type crashTotals struct {
	kills, atStart, inflightKills, doneKills, lateKills, settled, cycles, procs, attempts, live, calls, cached, gaps int
}

func (ct *crashTest) runCycle(n int, rng *rand.Rand, ref crashRef, points int, total *crashTotals) *crashCycle {
	t := ct.t
	t.Helper()
	c := &crashCycle{n: n, stateDir: filepath.Join(t.TempDir(), "state")}
	for {
		args := []string{"--state-dir", c.stateDir, "run", "--json", "--max-concurrency", crashConcurrency}
		if c.runID == "" {
			args = append(args, "-w", "wf.lua")
		} else {
			args = append(args, "--resume", c.runID)
		}
		kill := total.kills < points
		k := 0
		if kill && rng.IntN(8) != 0 {
			k = 1 + rng.IntN(ref.lines)
		}
		p := ct.start(args...)
		c.procs = append(c.procs, p)
		if kill {
			if k > 0 {
				p.waitLines(t, k)
			}
			_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails only when the run already ended
		}
		code, signaled := p.wait(t)
		if !signaled {
			// A process killed after it stored a completed run_done but before it updated
			// the run's row: the resume settles the run from run_done and refuses to run
			// it again. The run is complete; its log is checked like any other.
			if code == 2 && c.runID != "" && strings.Contains(p.stderrText(), "resume refused: it is completed") {
				total.settled++
				return c
			}
			if code != 0 {
				t.Fatalf("cycle %d, process %d (%s) exited with %d\nstdout:\n%s\nstderr:\n%s", n, len(c.procs),
					strings.Join(args, " "), code, p.rawText(), p.stderrText())
			}
			if c.runID == "" && len(p.lines()) > 0 {
				// Every earlier process of this cycle died before it created the run.
				c.runID = runIDOf(t, n, p.lines()[0])
			}
			return c // the run completed
		}
		total.kills++
		if k == 0 {
			total.atStart++
		}
		if c.runID == "" && len(p.lines()) > 0 {
			c.runID = runIDOf(t, n, p.lines()[0])
		}
		kr := ct.afterKill(c, len(c.procs)-1, k, len(p.lines()))
		c.kills = append(c.kills, kr)
		if kr.late {
			total.lateKills++
			return c
		}
	}
}

// runIDOf is the run id in the first JSON event line a process printed.
func runIDOf(t *testing.T, cycle int, line string) string {
	t.Helper()
	var head struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(line), &head); err != nil || head.RunID == "" {
		t.Fatalf("cycle %d: first line has no run_id: %s", cycle, line)
	}
	return head.RunID
}

// afterKill reads the state a killed process left behind.
func (ct *crashTest) afterKill(c *crashCycle, proc, k, seen int) crashKill {
	t := ct.t
	t.Helper()
	ctx := context.Background()
	kr := crashKill{proc: proc, k: k, seen: seen, completed: map[string]bool{}, scheduled: map[string]bool{},
		results: map[string]string{}}
	st := ct.openState(c.stateDir)
	defer st.Close()
	if c.runID == "" {
		// Killed before it printed anything: it may still have created the run.
		runs, err := st.ListRuns(ctx, storage.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) > 1 {
			t.Fatalf("cycle %d: %d runs in a state dir that only this cycle uses", c.n, len(runs))
		}
		if len(runs) == 0 {
			return kr
		}
		c.runID = runs[0].ID
	}
	row, err := st.GetRun(ctx, c.runID)
	if err != nil {
		t.Fatal(err)
	}
	kr.attempt = row.Attempt
	switch row.Status {
	case storage.StatusRunning:
	case storage.StatusCompleted:
		// The kill came after the run was recorded completed, while the process exited.
		kr.late = true
	default:
		t.Errorf("cycle %d: after the kill of process %d the run is %s, want running (its process died)", c.n, proc+1, row.Status)
	}
	evs, err := st.Events(ctx, c.runID, 0, 0)
	if err != nil && !errors.Is(err, storage.ErrRunNotFound) {
		t.Fatal(err)
	}
	if len(evs) > 0 {
		kr.maxSeq = evs[len(evs)-1].Seq
	}
	entries, err := st.Journal(ctx, c.runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Status {
		case storage.EntryCompleted:
			kr.results[e.CallKey] = string(e.Result)
			if e.Kind == "agent" {
				kr.completed[e.CallKey] = true
			}
		case storage.EntryScheduled:
			if e.Kind == "agent" {
				kr.scheduled[e.CallKey] = true
			}
		default:
			t.Errorf("cycle %d: after kill %d, journal entry %s is %s (%s); no call of this workflow fails", c.n, proc+1, e.CallKey, e.Status, e.Error)
		}
	}
	return kr
}

// verify checks a completed cycle against the kills it went through.
func (ct *crashTest) verify(c *crashCycle, ref crashRef, total *crashTotals) {
	t := ct.t
	t.Helper()
	ctx := context.Background()
	st := ct.openState(c.stateDir)
	defer st.Close()
	row, err := st.GetRun(ctx, c.runID)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, c.runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := st.Journal(ctx, c.runID)
	if err != nil {
		t.Fatal(err)
	}
	errorf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("cycle %d (run %s): %s", c.n, c.runID, fmt.Sprintf(format, args...))
	}
	if row.Status != storage.StatusCompleted {
		errorf("the run is %s after its last process exited 0 (error %q)", row.Status, row.Error)
	}

	// No lost events: seq 1..n, run_done (completed) last.
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			errorf("event %d has seq %d: the log has a gap or is out of order", i+1, ev.Seq)
			return
		}
	}
	if len(evs) == 0 || evs[len(evs)-1].Type != event.RunDone || evs[len(evs)-1].Data["status"] != "completed" {
		errorf("the last event is not run_done with status completed")
		return
	}
	// A killed process may have stored run_done (the kill came between run_done and the
	// update of the run's row), but then as the last event it stored.
	for _, ev := range evs[:len(evs)-1] {
		if ev.Type != event.RunDone {
			continue
		}
		i := slices.IndexFunc(c.kills, func(k crashKill) bool { return k.maxSeq >= ev.Seq })
		if i < 0 || c.kills[i].maxSeq != ev.Seq {
			errorf("run_done at seq %d of %d is not the last event its process stored", ev.Seq, len(evs))
			continue
		}
		total.doneKills++
	}

	// Every line a process printed was stored first, and is stored unchanged.
	for i, p := range c.procs {
		for j, line := range p.lines() {
			var head struct {
				Seq int64 `json:"seq"`
			}
			if err := json.Unmarshal([]byte(line), &head); err != nil || head.Seq < 1 || head.Seq > int64(len(evs)) {
				errorf("process %d, line %d: not an event of the log (err %v): %s", i+1, j+1, err, line)
				continue
			}
			if want := encodeEvent(t, evs[head.Seq-1]); line != want {
				errorf("process %d printed event %d differently from the stored one:\nprinted %s\nstored  %s", i+1, head.Seq, line, want)
			}
		}
	}

	// run_started: one per attempt, attempts 1..row.Attempt; a missing attempt number is
	// allowed only for a process killed before it printed its run_started.
	var attempts []int
	for _, ev := range evs {
		if ev.Type == event.RunStarted {
			attempts = append(attempts, runtime.AttemptOf(ev))
		}
	}
	silent := 0
	printed := map[int]bool{}
	for i, p := range c.procs {
		ls := p.lines()
		if len(ls) == 0 {
			if i < len(c.procs)-1 {
				silent++
			}
			continue
		}
		var ev event.Event
		if err := json.Unmarshal([]byte(ls[0]), &ev); err != nil || ev.Type != event.RunStarted {
			errorf("process %d: the first line is not run_started: %s", i+1, ls[0])
			continue
		}
		printed[runtime.AttemptOf(ev)] = true
	}
	gaps := 0
	for i, a := range attempts {
		prev := 0
		if i > 0 {
			prev = attempts[i-1]
		}
		if a <= prev {
			errorf("run_started attempts %v do not rise", attempts)
			break
		}
		gaps += a - prev - 1
	}
	for a := range printed {
		if !slices.Contains(attempts, a) {
			errorf("attempt %d printed its run_started but the log has none", a)
		}
	}
	if len(attempts) == 0 || attempts[0] != 1 || attempts[len(attempts)-1] != row.Attempt {
		errorf("run_started attempts %v; want 1 first and the run's attempt %d last", attempts, row.Attempt)
	}
	if gaps > silent {
		errorf("run_started attempts %v miss %d attempt numbers, but only %d processes were killed before printing", attempts, gaps, silent)
	}
	if len(attempts) > len(c.procs) {
		errorf("%d run_started events for %d processes", len(attempts), len(c.procs))
	}
	total.gaps += gaps
	total.attempts += row.Attempt

	// Which process stored which events: process i's are those after kill i-1's last seq.
	procOf := func(seq int64) int {
		for i, kr := range c.kills {
			if seq <= kr.maxSeq {
				return i
			}
		}
		return len(c.kills)
	}
	for i := 1; i < len(c.kills); i++ {
		if c.kills[i].maxSeq < c.kills[i-1].maxSeq {
			errorf("the event log shrank from seq %d to %d between kills %d and %d", c.kills[i-1].maxSeq, c.kills[i].maxSeq, i, i+1)
		}
	}

	// Live starts and cached replays per call key and process.
	type keyStats struct {
		live      []int64 // seq of each live agent_started
		liveProc  map[int]int
		okDone    bool
		cachedSeq []int64
	}
	keys := map[string]*keyStats{}
	stat := func(k string) *keyStats {
		if keys[k] == nil {
			keys[k] = &keyStats{liveProc: map[int]int{}}
		}
		return keys[k]
	}
	for _, ev := range evs {
		key := str(ev.Data, "call_key")
		switch ev.Type {
		case event.AgentStarted:
			s := stat(key)
			s.live = append(s.live, ev.Seq)
			s.liveProc[procOf(ev.Seq)]++
		case event.AgentDone:
			s := stat(key)
			if ev.Data["status"] == "ok" {
				s.okDone = true
			}
			if ev.Data["cached"] == true {
				s.cachedSeq = append(s.cachedSeq, ev.Seq)
				total.cached++
				// A replay stands for a call completed before this process started.
				if p := procOf(ev.Seq); p == 0 || !c.kills[p-1].completed[key] {
					errorf("call %s replayed from the journal (cached agent_done, seq %d) in process %d, but it was not completed when that process started", key, ev.Seq, p+1)
				}
			}
		}
	}

	// Zero completed calls run twice.
	for i, kr := range c.kills {
		for key := range kr.completed {
			for _, seq := range stat(key).live {
				if seq > kr.maxSeq {
					errorf("call %s was completed in the journal when process %d was killed (kill %d, after %d lines), yet it started live again at seq %d",
						key, kr.proc+1, i+1, kr.seen, seq)
				}
			}
		}
		// A call's result is committed before anything sees it: a stored agent_done (ok)
		// means a completed journal entry.
		for _, ev := range evs[:min(int(kr.maxSeq), len(evs))] {
			if ev.Type == event.AgentDone && ev.Data["status"] == "ok" && !kr.completed[str(ev.Data, "call_key")] {
				errorf("after kill %d, call %s has an agent_done (seq %d) but no completed journal entry", i+1, str(ev.Data, "call_key"), ev.Seq)
			}
		}
		// Journal and events agree: a call journaled as scheduled had its agent_started stored.
		for key := range kr.scheduled {
			if s := stat(key); len(s.live) == 0 || s.live[0] > kr.maxSeq {
				errorf("after kill %d, call %s is journaled as scheduled but no agent_started for it was stored", i+1, key)
			}
		}
		if i > 0 {
			for key := range c.kills[i-1].completed {
				if !kr.completed[key] {
					errorf("call %s was completed after kill %d but is not after kill %d", key, i, i+1)
				}
			}
			for key, res := range c.kills[i-1].results {
				if kr.results[key] != res {
					errorf("the journaled result of %s changed between kills %d and %d:\n%s\n%s", key, i, i+1, res, kr.results[key])
				}
			}
		}
	}

	// Invocations of each call: at most one per process, at most 1 + the kills that caught it
	// in flight (started live in the killed process and not completed at the kill).
	final := map[string]storage.Entry{}
	for _, e := range entries {
		final[e.CallKey] = e
	}
	for key, s := range keys {
		inflight := 0
		for i, kr := range c.kills {
			if s.liveProc[i] > 0 && !kr.completed[key] {
				inflight++
			}
		}
		total.inflightKills += inflight
		for p, n := range s.liveProc {
			if n > 1 {
				errorf("call %s started live %d times in process %d", key, n, p+1)
			}
		}
		if len(s.live) > 1+inflight {
			errorf("call %s started live %d times; only %d kills caught it in flight", key, len(s.live), inflight)
		}
		total.live += len(s.live)
		if !s.okDone {
			errorf("call %s has no agent_done with status ok", key)
		}
	}
	if len(c.kills) > 0 {
		last := c.kills[len(c.kills)-1]
		for key, res := range last.results {
			if e, ok := final[key]; !ok || e.Status != storage.EntryCompleted || string(e.Result) != res {
				errorf("call %s, completed at the last kill, is not completed with the same result in the final journal", key)
			}
		}
	}

	// The final journal holds exactly the reference run's agent calls, all completed.
	agentKeys := map[string]bool{}
	for _, e := range entries {
		if e.Kind != "agent" {
			continue
		}
		agentKeys[e.CallKey] = true
		if e.Status != storage.EntryCompleted {
			errorf("call %s is %s in the final journal", e.CallKey, e.Status)
		}
		if keys[e.CallKey] == nil || !keys[e.CallKey].okDone {
			errorf("call %s has no agent_done with status ok", e.CallKey)
		}
	}
	if !reflect.DeepEqual(agentKeys, ref.agentKeys) {
		errorf("the agent calls differ from the reference run's:\n got %v\nwant %v", slices.Sorted(maps.Keys(agentKeys)), slices.Sorted(maps.Keys(ref.agentKeys)))
	}
	total.calls += len(agentKeys)

	// luft.random/now: every attempt that logged its values saw the journaled ones.
	want := map[string]any{}
	names := map[string]string{"main/1": "random", "main/2": "randint", "main/3": "now"}
	for _, e := range entries {
		name, ok := names[e.CallKey]
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal(e.Result, &v); err != nil {
			errorf("journal entry %s: %v", e.CallKey, err)
		}
		want[name] = v
	}
	if len(want) != 3 {
		errorf("the journal has %d of the 3 luft.random/now entries: %v", len(want), want)
	}
	logged := 0
	for _, ev := range evs {
		msg := str(ev.Data, "msg")
		if ev.Type != event.Log || !strings.HasPrefix(msg, "effects=") {
			continue
		}
		logged++
		var got map[string]any
		if err := json.Unmarshal([]byte(strings.TrimPrefix(msg, "effects=")), &got); err != nil {
			errorf("log %q: %v", msg, err)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			errorf("process %d saw luft.random/now values %v, the journal has %v", procOf(ev.Seq)+1, got, want)
		}
	}
	if logged == 0 {
		errorf("no attempt logged its luft.random/now values")
	}

	// The report, as luft status shows it and as the last run_done carried it, renders as the
	// uninterrupted run printed it.
	sp := ct.start("--state-dir", c.stateDir, "status", c.runID, "--json")
	if code, signaled := sp.wait(t); code != 0 || signaled {
		t.Fatalf("luft status exited with %d\nstderr:\n%s", code, sp.stderrText())
	}
	var status struct {
		Status string `json:"status"`
		Report any    `json:"report"`
	}
	if err := json.Unmarshal([]byte(sp.rawText()), &status); err != nil {
		t.Fatalf("luft status --json: %v\n%s", err, sp.rawText())
	}
	if status.Status != "completed" {
		errorf("luft status says %s", status.Status)
	}
	for what, v := range map[string]any{"luft status --json": status.Report, "run_done": evs[len(evs)-1].Data["report"]} {
		text, err := reportText(v)
		if err != nil {
			errorf("%s report: %v", what, err)
		} else if text != ref.stdout {
			errorf("the report from %s differs from the uninterrupted run's stdout:\n got %s\nwant %s", what, text, ref.stdout)
		}
	}

	total.cycles++
	total.procs += len(c.procs)
	t.Logf("cycle %d: %d kills (at lines %s), %d attempts, %d events", c.n, len(c.kills), killMoments(c.kills), row.Attempt, len(evs))
}

func killMoments(ks []crashKill) string {
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(',')
		}
		if k.k == 0 {
			b.WriteString("start")
		} else {
			fmt.Fprintf(&b, "%d", k.seen)
		}
	}
	return b.String()
}

// encodeEvent is the line luft run --json prints for ev.
func encodeEvent(t *testing.T, ev event.Event) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func (ct *crashTest) openState(dir string) storage.DB {
	t := ct.t
	t.Helper()
	st, err := storage.OpenURL(context.Background(), ct.storageURL(dir), dir)
	if err != nil {
		t.Fatalf("open state dir %s: %v", dir, err)
	}
	return st
}

// crashProc is one luft process; its stdout is collected line by line so the test can wait
// for the k-th line.
type crashProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer // written by exec's copier; read after done

	mu   sync.Mutex
	raw  strings.Builder
	ls   []string
	more chan struct{} // closed and replaced on every line and at EOF
	eof  bool

	done     chan struct{}
	code     int
	signaled bool
	werr     error // a failure to wait other than a non-zero exit or a signal
}

// start runs luft with args in ct.work, with LUFT_MOCK_LATENCY_MS set and no other LUFT_*
// variable from the test's environment.
func (ct *crashTest) start(args ...string) *crashProc {
	t := ct.t
	t.Helper()
	cmd := exec.Command(ct.bin, args...)
	cmd.Dir = ct.work
	cmd.Env = testEnv(nil, "LUFT_MOCK_LATENCY_MS="+crashLatencyMS, "NO_COLOR=1")
	if i := slices.Index(args, "--state-dir"); i >= 0 && i+1 < len(args) && ct.pg {
		cmd.Env = append(cmd.Env, storageEnv+"="+ct.storageURL(args[i+1]))
	}
	p := &crashProc{cmd: cmd, more: make(chan struct{}), done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.feed(stdout)
		err := cmd.Wait() // after all of stdout is read
		p.werr = err
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.werr = nil
			p.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.signaled = true
			}
		}
		close(p.done)
	}()
	killAtCleanup(t, cmd, p.done)
	return p
}

func (p *crashProc) feed(r io.Reader) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			p.mu.Lock()
			p.raw.WriteString(s)
			p.ls = append(p.ls, strings.TrimSuffix(s, "\n"))
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
		}
		if err != nil {
			break
		}
	}
	p.mu.Lock()
	p.eof = true
	close(p.more)
	p.mu.Unlock()
}

// waitLines returns once the process has printed n lines or closed its stdout.
func (p *crashProc) waitLines(t *testing.T, n int) {
	t.Helper()
	deadline := time.NewTimer(crashTimeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		enough, more := len(p.ls) >= n || p.eof, p.more
		p.mu.Unlock()
		if enough {
			return
		}
		select {
		case <-more:
		case <-deadline.C:
			t.Fatalf("no line %d from luft within %s\nstdout:\n%s", n, crashTimeout, p.rawText())
		}
	}
}

// wait returns the exit code, or signaled=true when the process was killed.
func (p *crashProc) wait(t *testing.T) (code int, signaled bool) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(crashTimeout):
		t.Fatalf("luft %s did not exit within %s\nstdout:\n%s", strings.Join(p.cmd.Args[1:], " "), crashTimeout, p.rawText())
	}
	if p.werr != nil {
		t.Fatalf("wait: %v", p.werr)
	}
	return p.code, p.signaled
}

func (p *crashProc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.ls)
}

func (p *crashProc) rawText() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// stderrText is only called after the process ended.
func (p *crashProc) stderrText() string { return p.stderr.String() }

func str(d map[string]any, k string) string {
	if v, ok := d[k]; ok && v != nil {
		return fmt.Sprint(v)
	}
	return ""
}
