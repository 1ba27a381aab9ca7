package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/lua"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// Tests of SPEC §4 (runs, journal, resume) and of the parts of §5 that several processes
// share: runs stopped at known points (a backend that blocks on one prompt until the run
// is cancelled, a call that fails once, a time budget) and resumed, and two Services over
// one state dir standing in for two luft processes.

// deadPID is above the largest pid_max Linux allows (2^22), so no process has it.
const deadPID = 1<<22 + 12345

// countingScheduler counts the turns it admits.
type countingScheduler struct {
	scheduler.Scheduler
	admits atomic.Int64
}

func (c *countingScheduler) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	c.admits.Add(1)
	return c.Scheduler.Admit(ctx, t)
}

// resumeEnv is one "process" over a state dir: a store of its own and a Service on it.
type resumeEnv struct {
	dir   string
	st    *storage.SQLite
	svc   *Service
	sched *countingScheduler
}

// openResumeEnv builds a Service over the state dir dir (opening its store once more, as
// another process would) with b as its only backend. pid is the process id it records as
// the owner of its runs; 0 means this process.
func openResumeEnv(t *testing.T, dir string, b adapters.Backend, pid int) *resumeEnv {
	t.Helper()
	return openResumeEnvWith(t, dir, b, pid, nil)
}

// openResumeEnvWith is openResumeEnv with the Service's store wrapped by wrap.
func openResumeEnvWith(t *testing.T, dir string, b adapters.Backend, pid int, wrap func(storage.Store) storage.Store) *resumeEnv {
	t.Helper()
	st, err := storage.Open(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sched := &countingScheduler{Scheduler: scheduler.NewGate(8)}
	var store storage.Store = st
	if wrap != nil {
		store = wrap(st)
	}
	svc, err := New(Options{
		Store:      store,
		StateDir:   dir,
		Backends:   adapters.NewRegistry("fake", b),
		Scheduler:  sched,
		Backoff:    func(int) time.Duration { return 0 },
		CancelPoll: 10 * time.Millisecond,
		PID:        pid,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &resumeEnv{dir: dir, st: st, svc: svc, sched: sched}
}

// blocker controls blockingBackend's blocking prompt.
type blocker struct {
	entered  chan struct{} // closed when the blocking prompt is first asked
	once     sync.Once
	released atomic.Bool
}

// release makes later asks of the blocking prompt echo.
func (k *blocker) release() { k.released.Store(true) }

// blockingBackend echoes every prompt, except that the prompt block hangs until its call
// is cancelled (closing entered on its first ask) until the blocker is released, and the
// first ask of failOnce fails.
func blockingBackend(block, failOnce string) (*scripted, *blocker) {
	k := &blocker{entered: make(chan struct{})}
	b := &scripted{}
	b.reply = func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		switch {
		case req.Prompt == block && !k.released.Load():
			k.once.Do(func() { close(k.entered) })
			<-ctx.Done()
			return agent.Result{Status: agent.StatusCancelled}, context.Cause(ctx)
		case req.Prompt == failOnce && n == 1:
			return agent.Result{Status: agent.StatusError, Error: "provider exploded"}, errors.New("provider exploded")
		}
		return echo(ctx, req, n)
	}
	return b, k
}

// dyingStore stands for a process that is killed: once dead, it writes nothing more.
type dyingStore struct {
	storage.Store
	dead atomic.Bool
}

var errDied = errors.New("the process was killed")

func (d *dyingStore) Append(ctx context.Context, runID string, evs ...event.Event) ([]event.Event, error) {
	if d.dead.Load() {
		return nil, errDied
	}
	return d.Store.Append(ctx, runID, evs...)
}

func (d *dyingStore) UpdateRun(ctx context.Context, id string, u storage.RunUpdate) error {
	if d.dead.Load() {
		return errDied
	}
	return d.Store.UpdateRun(ctx, id, u)
}

func (d *dyingStore) JournalScheduled(ctx context.Context, e storage.Entry) error {
	if d.dead.Load() {
		return errDied
	}
	return d.Store.JournalScheduled(ctx, e)
}

func (d *dyingStore) JournalFinish(ctx context.Context, e storage.Entry) (int64, error) {
	if d.dead.Load() {
		return 0, errDied
	}
	return d.Store.JournalFinish(ctx, e)
}

func (d *dyingStore) SaveFile(ctx context.Context, runID, path string, content []byte) (string, error) {
	if d.dead.Load() {
		return "", errDied
	}
	return d.Store.SaveFile(ctx, runID, path, content)
}

func (d *dyingStore) InvalidateFrom(ctx context.Context, runID string, completedSeq int64) (int, error) {
	if d.dead.Load() {
		return 0, errDied
	}
	return d.Store.InvalidateFrom(ctx, runID, completedSeq)
}

func (d *dyingStore) RequestCancel(ctx context.Context, runID string) error {
	if d.dead.Load() {
		return errDied
	}
	return d.Store.RequestCancel(ctx, runID)
}

// asked is how often the backend was asked prompt p; total how often it was asked at all.
func asked(b *scripted, p string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[p]
}

func total(b *scripted) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}

func writeScript(t *testing.T, dir, name, src string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// oneThenBlock is a workflow whose call "one" completes and whose call "block" hangs on
// blockingBackend("block", ...).
const oneThenBlock = `function main()
  local a = agent{prompt="one"}
  local b = agent{prompt="block"}
  report(a.output .. "|" .. b.output)
end`

// orphan sets a run back to running under a pid no process has, as a process killed
// while driving it would leave its row.
func orphan(t *testing.T, st storage.Store, id string) {
	t.Helper()
	running, pid := storage.StatusRunning, deadPID
	if err := st.UpdateRun(t.Context(), id, storage.RunUpdate{Status: &running, PID: &pid}); err != nil {
		t.Fatal(err)
	}
}

// startAndCancel starts the workflow file path and cancels the run once the backend is
// inside its blocking call, then releases the blocker. It returns the run's events and
// result.
func startAndCancel(t *testing.T, e *resumeEnv, path string, k *blocker) (*Run, []event.Event, Result) {
	t.Helper()
	r, err := e.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	select {
	case <-k.entered:
	case <-r.Done():
		t.Fatalf("the run ended before reaching its blocking call: %s %v", r.Wait().Status, r.Wait().Err)
	}
	r.Cancel()
	res := r.Wait()
	if res.Status != StatusCancelled || !errors.Is(res.Err, ErrCancelled) {
		t.Fatalf("first attempt: %s %v, want cancelled", res.Status, res.Err)
	}
	k.release()
	return r, collect(t, r), res
}

// waitRun is Run.Wait with a guard against a run that never ends (a failure, not a
// timing: every run here ends long before it).
func waitRun(t *testing.T, r *Run) Result {
	t.Helper()
	select {
	case <-r.Done():
	case <-time.After(time.Minute):
		t.Fatalf("run %s did not end", r.ID)
	}
	return r.Wait()
}

func resume(t *testing.T, e *resumeEnv, rs ResumeSpec) *Run {
	t.Helper()
	r, err := e.svc.Resume(t.Context(), rs)
	if err != nil {
		t.Fatalf("resume %+v: %v", rs, err)
	}
	return r
}

// doneByKey maps call_key to the agent_done event of that key.
func doneByKey(evs []event.Event) map[string]event.Event {
	m := map[string]event.Event{}
	for _, ev := range ofType(evs, event.AgentDone) {
		m[ev.Data["call_key"].(string)] = ev
	}
	return m
}

func lastSeq(evs []event.Event) int64 {
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

func getRun(t *testing.T, st storage.Store, id string) storage.Run {
	t.Helper()
	row, err := st.GetRun(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func TestResumeReplaysWithoutCallingTheBackend(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "wf/main.lua", `function main()
  local t = luft.now()
  local r = luft.random()
  local d = luft.random(1, 1000000)
  local u = luft.uuid()
  local a = agent{prompt="first"}
  local ps = parallel({"x", "y", "z"}, function(s) return agent{prompt="par " .. s}.output end)
  local sub = workflow("lib/sub.lua", {topic = "t"})
  local last = agent{prompt="block"}
  report({now=t, r=r, d=d, u=u, first=a.output, first_cached=a.cached, par=ps, sub=sub,
          last=last.output, last_cached=last.cached, attempt=ctx.attempt, resumed=ctx.resumed})
end`)
	writeScript(t, dir, "wf/lib/sub.lua", `function main()
  local s = agent{prompt="sub " .. args.topic}
  report({s=s.output, cached=s.cached})
end`)
	b, k := blockingBackend("block", "")
	e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	r1, evs1, _ := startAndCancel(t, e, path, k)
	if got := total(b); got != 6 {
		t.Fatalf("first attempt asked the backend %d times, want 6 (first, 3 parallel, sub, block)", got)
	}

	// The values luft.now/random/uuid drew in attempt 1, from its journal.
	journal, err := e.st.Journal(t.Context(), r1.ID)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]any{}
	kinds := map[string]string{"main/1": lua.KindNow, "main/2": lua.KindRandom, "main/3": lua.KindRandom, "main/4": lua.KindUUID}
	for _, j := range journal {
		if want, ok := kinds[j.CallKey]; ok {
			if j.Kind != want || j.Status != storage.EntryCompleted {
				t.Fatalf("journal %s: kind %s status %s, want %s completed", j.CallKey, j.Kind, j.Status, want)
			}
			var v any
			if err := json.Unmarshal(j.Result, &v); err != nil {
				t.Fatal(err)
			}
			values[j.CallKey] = v
		}
	}
	if len(values) != 4 {
		t.Fatalf("journal has values %v, want main/1..main/4 (journal: %+v)", values, journal)
	}
	before := doneByKey(evs1)
	var completed []string
	for key, ev := range before {
		if ev.Data["status"] == "ok" {
			completed = append(completed, key)
		}
	}
	if len(completed) != 5 {
		t.Fatalf("attempt 1 completed %v, want 5 calls", completed)
	}

	admits := e.sched.admits.Load()
	r2 := resume(t, e, ResumeSpec{Run: r1.ID[:13]})
	if r2.ID != r1.ID || r2.Attempt != 2 {
		t.Fatalf("resumed %s attempt %d, want %s attempt 2", r2.ID, r2.Attempt, r1.ID)
	}
	evs2 := collect(t, r2)
	res := r2.Wait()
	if res.Status != StatusCompleted {
		t.Fatalf("resume: %s %v", res.Status, res.Err)
	}
	// Attempt 2's events continue attempt 1's stream.
	var own []event.Event
	for _, ev := range evs2 {
		if ev.Seq > lastSeq(evs1) {
			own = append(own, ev)
		}
	}
	if own[0].Seq != lastSeq(evs1)+1 || own[0].Type != event.RunStarted || own[0].Data["resumed"] != true {
		t.Fatalf("attempt 2 starts with %d %s %v, want %d run_started resumed", own[0].Seq, own[0].Type, own[0].Data, lastSeq(evs1)+1)
	}
	for i, ev := range evs2 {
		if ev.Seq != int64(i+1) {
			t.Fatalf("event %d has seq %d: the stream has a gap across attempts", i, ev.Seq)
		}
	}
	after := doneByKey(own)
	for _, k := range completed {
		if ev, ok := after[k]; !ok || ev.Data["cached"] != true || ev.Data["status"] != "ok" {
			t.Errorf("attempt 2 agent_done %s = %v, want cached ok", k, ev.Data)
		}
	}
	if n := len(ofType(own, event.AgentStarted)); n != 1 {
		t.Errorf("attempt 2 started %d calls, want 1 (only the unfinished one)", n)
	}
	live := 0
	for key, ev := range after {
		if ev.Data["cached"] != true {
			live++
			if ev.Data["status"] != "ok" || before[key].Data["status"] == "ok" {
				t.Errorf("live call %s in attempt 2: %v (attempt 1: %v)", key, ev.Data, before[key].Data)
			}
		}
	}
	if live != 1 || len(after) != 6 {
		t.Errorf("attempt 2: %d agent_done, %d live; want 6 and 1", len(after), live)
	}
	if total(b) != 7 || asked(b, "block") != 2 || asked(b, "first") != 1 || asked(b, "par y") != 1 || asked(b, "sub t") != 1 {
		t.Errorf("backend asked %d times (block %d, first %d), want 7 with only block again", total(b), asked(b, "block"), asked(b, "first"))
	}
	if n := e.sched.admits.Load() - admits; n != 1 {
		t.Errorf("attempt 2 went through the scheduler %d times, want 1", n)
	}
	if res.Agents != (Counts{OK: 1, Cached: 5}) {
		t.Errorf("counts %+v, want 1 ok 5 cached", res.Agents)
	}

	rep := res.Report.(map[string]any)
	for key, field := range map[string]string{"main/1": "now", "main/2": "r", "main/3": "d", "main/4": "u"} {
		if rep[field] != values[key] {
			t.Errorf("report %s = %v, want %v as drawn in attempt 1", field, rep[field], values[key])
		}
	}
	if rep["first"] != "re: first" || rep["first_cached"] != true || rep["last"] != "re: block" || rep["last_cached"] != false ||
		rep["attempt"] != 2.0 || rep["resumed"] != true {
		t.Errorf("report %v", rep)
	}
	if fmt.Sprint(rep["par"]) != "[re: par x re: par y re: par z]" {
		t.Errorf("report par %v", rep["par"])
	}
	if sub, _ := rep["sub"].(map[string]any); sub["s"] != "re: sub t" || sub["cached"] != true {
		t.Errorf("report sub %v, want the sub-workflow's call replayed", rep["sub"])
	}
	row := getRun(t, e.st, r1.ID)
	if row.Status != storage.StatusCompleted || row.Attempt != 2 || !row.HasReport || row.Error != "" {
		t.Errorf("row %+v", row)
	}
}

func TestResumeFromEveryResumableState(t *testing.T) {
	cases := []struct {
		name string
		src  string
		// first runs the first attempt and leaves the run in the state under test.
		first  func(t *testing.T, e *resumeEnv, b *scripted, path string, k *blocker) string
		status string // the run's status before the resume
		second string // the prompt of the call that did not finish
	}{
		{
			name:   "failed",
			status: storage.StatusFailed,
			second: "flaky",
			src: `function main()
  local a = agent{prompt="one"}
  local b = agent{prompt="flaky"}
  if not b.ok then error(b.error) end
  report(a.output .. "|" .. b.output)
end`,
			first: func(t *testing.T, e *resumeEnv, _ *scripted, path string, k *blocker) string {
				r, err := e.svc.Start(t.Context(), Spec{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				res := r.Wait()
				if res.Status != StatusFailed || !strings.Contains(res.Err.Error(), "provider exploded") {
					t.Fatalf("first attempt: %s %v, want failed by the backend", res.Status, res.Err)
				}
				return r.ID
			},
		},
		{
			name:   "cancelled",
			second: "block",
			status: storage.StatusCancelled,
			src:    oneThenBlock,
			first: func(t *testing.T, e *resumeEnv, _ *scripted, path string, k *blocker) string {
				r, _, _ := startAndCancel(t, e, path, k)
				return r.ID
			},
		},
		{
			// The budget is set after the first call, so that call is never cut short;
			// the resumed attempt gets a budget it cannot reach.
			name:   "suspended",
			second: "block",
			status: storage.StatusSuspended,
			src: `function main()
  local a = agent{prompt="one"}
  budget{time_ms = ctx.attempt == 1 and 20 or 600000}
  local b = agent{prompt="block"}
  report(a.output .. "|" .. b.output)
end`,
			first: func(t *testing.T, e *resumeEnv, _ *scripted, path string, k *blocker) string {
				r, err := e.svc.Start(t.Context(), Spec{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				res := r.Wait()
				if res.Status != StatusSuspended || !errors.Is(res.Err, ErrTimeBudget) {
					t.Fatalf("first attempt: %s %v, want suspended", res.Status, res.Err)
				}
				k.release()
				return r.ID
			},
		},
		{
			// The process driving the run is killed while a call is in flight: its row
			// still says running, its events have no run_done, block is only scheduled.
			name:   "running, its process killed mid-attempt",
			second: "block",
			status: storage.StatusRunning,
			src:    oneThenBlock,
			first: func(t *testing.T, e *resumeEnv, b *scripted, path string, k *blocker) string {
				var dying *dyingStore
				victim := openResumeEnvWith(t, e.dir, b, deadPID, func(st storage.Store) storage.Store {
					dying = &dyingStore{Store: st}
					return dying
				})
				r, err := victim.svc.Start(t.Context(), Spec{Path: path})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case <-k.entered:
				case <-r.Done():
					t.Fatalf("the run ended before its blocking call: %v", r.Wait().Err)
				}
				// Events are committed behind the run: die only once the blocking call's
				// agent_started is stored (subscribers read the log), as a process killed
				// then would have it.
				for ev := range r.Subscribe(t.Context(), 0) {
					if ev.Type == event.AgentStarted && ev.Data["call_key"] == "main/2" {
						break
					}
				}
				dying.dead.Store(true)
				r.Cancel()
				r.Wait()
				k.release()
				evs, err := e.st.Events(t.Context(), r.ID, 0, 0)
				if err != nil || len(evs) == 0 || evs[len(evs)-1].Type == event.RunDone {
					t.Fatalf("the killed attempt's events: %d, the last %v (want no run_done): %v", len(evs), evs[max(0, len(evs)-1):], err)
				}
				journal, err := e.st.Journal(t.Context(), r.ID)
				if err != nil || len(journal) != 2 || journal[0].Status != storage.EntryCompleted || journal[1].Status != storage.EntryScheduled {
					t.Fatalf("journal of the killed attempt: %+v %v", journal, err)
				}
				info, err := e.svc.Status(t.Context(), r.ID)
				if err != nil || !info.Stale || info.Live || info.PID != deadPID {
					t.Fatalf("status of the killed run: %+v %v, want stale", info, err)
				}
				return r.ID
			},
		},
		{
			// The simplest form of a killed run: one that ended, set back to running by hand
			// with a pid nobody has. Its run_done is stored, so resume first settles it.
			name:   "running, its process gone after run_done",
			second: "block",
			status: storage.StatusRunning,
			src:    oneThenBlock,
			first: func(t *testing.T, e *resumeEnv, _ *scripted, path string, k *blocker) string {
				r, _, _ := startAndCancel(t, e, path, k)
				orphan(t, e.st, r.ID)
				info, err := e.svc.Status(t.Context(), r.ID)
				if err != nil || !info.Stale || info.Live {
					t.Fatalf("status of a running row with a dead pid: %+v %v, want stale", info, err)
				}
				return r.ID
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := writeScript(t, dir, "flow.lua", tc.src)
			b, k := blockingBackend("block", "flaky")
			e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
			id := tc.first(t, e, b, path, k)
			if row := getRun(t, e.st, id); row.Status != tc.status || row.Attempt != 1 {
				t.Fatalf("before resume: %s attempt %d, want %s attempt 1", row.Status, row.Attempt, tc.status)
			}
			if asked(b, "one") != 1 {
				t.Fatalf("first attempt asked one %d times", asked(b, "one"))
			}
			res := resume(t, e, ResumeSpec{Run: id}).Wait()
			if res.Status != StatusCompleted || res.Attempt != 2 {
				t.Fatalf("resume: %s attempt %d: %v", res.Status, res.Attempt, res.Err)
			}
			if res.Report != "re: one|re: "+tc.second || res.Agents != (Counts{OK: 1, Cached: 1}) {
				t.Fatalf("report %v counts %+v", res.Report, res.Agents)
			}
			if asked(b, "one") != 1 {
				t.Fatalf("the completed call ran again: one asked %d times", asked(b, "one"))
			}
			row := getRun(t, e.st, id)
			if row.Status != storage.StatusCompleted || row.Attempt != 2 || row.PID != os.Getpid() ||
				row.Error != "" || row.CancelRequested || row.FinishedAt.IsZero() {
				t.Fatalf("row after resume: %+v", row)
			}
		})
	}
}

func TestResumeRefusals(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "flow.lua", `function main() report(agent{prompt=args.p or "x"}.output) end`)
	b, k := blockingBackend("block", "")
	e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)

	// Nothing to resume yet.
	if _, err := e.svc.Resume(t.Context(), ResumeSpec{}); !errors.Is(err, storage.ErrRunNotFound) {
		t.Fatalf("resume with no runs: %v, want ErrRunNotFound", err)
	}
	done1 := runToEnd(t, e, path, nil)
	done2 := runToEnd(t, e, path, nil)
	for _, id := range []string{done1, done2} {
		if row := getRun(t, e.st, id); row.Status != storage.StatusCompleted {
			t.Fatalf("run %s: %s", id, row.Status)
		}
	}
	common := 0
	for common < len(done1) && done1[common] == done2[common] {
		common++
	}
	if common == 0 {
		t.Fatalf("ids %s and %s share no prefix", done1, done2)
	}

	cases := []struct {
		name string
		ref  string
		want error
		msg  string
	}{
		{name: "unknown id", ref: "ffffffff-dead", want: storage.ErrRunNotFound, msg: "ffffffff-dead"},
		{name: "ambiguous prefix", ref: done1[:common], want: storage.ErrAmbiguousRun, msg: done1},
		{name: "newest unfinished when every run finished", ref: "", want: storage.ErrRunNotFound, msg: "no unfinished run"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			admits := e.sched.admits.Load()
			r, err := e.svc.Resume(t.Context(), ResumeSpec{Run: tc.ref})
			if !errors.Is(err, tc.want) || r != nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("resume %q: %v, want %v naming %q", tc.ref, err, tc.want, tc.msg)
			}
			if e.sched.admits.Load() != admits {
				t.Fatal("a refused resume ran calls")
			}
		})
	}
	// A completed run resumes idempotently: nothing runs, its stored result comes back.
	for _, ref := range []string{done1, done2[:13]} {
		admits := e.sched.admits.Load()
		r, err := e.svc.Resume(t.Context(), ResumeSpec{Run: ref})
		if err != nil || !r.AlreadyCompleted() {
			t.Fatalf("resume of completed run %q: %v", ref, err)
		}
		res := r.Wait()
		if res.Status != StatusCompleted || !res.HasReport || res.Report != "re: x" || res.Agents.OK != 1 {
			t.Fatalf("resume of completed run %q: %+v", ref, res)
		}
		var evs []event.Event
		for ev := range r.SubscribeAttempt(t.Context()) {
			evs = append(evs, ev)
		}
		if len(evs) == 0 || evs[len(evs)-1].Type != event.RunDone {
			t.Fatalf("replayed events of completed run %q: %v", ref, evs)
		}
		if e.sched.admits.Load() != admits {
			t.Fatal("resume of a completed run ran calls")
		}
	}
	var amb *storage.AmbiguousRunError
	if _, err := e.svc.Resume(t.Context(), ResumeSpec{Run: done1[:common]}); !errors.As(err, &amb) ||
		!slices.Contains(amb.Candidates, done1) || !slices.Contains(amb.Candidates, done2) {
		t.Fatalf("ambiguous: %v", err)
	}
	for _, id := range []string{done1, done2} {
		if row := getRun(t, e.st, id); row.Attempt != 1 || row.Status != storage.StatusCompleted {
			t.Fatalf("a refused resume changed run %s: %+v", id, row)
		}
	}

	// A run this process drives, and the same run seen from another process.
	live, err := e.svc.Start(t.Context(), Spec{Path: path, Args: map[string]any{"p": "block"}})
	if err != nil {
		t.Fatal(err)
	}
	<-k.entered
	other := openResumeEnv(t, e.dir, b, os.Getppid())
	for name, svc := range map[string]*Service{"this process": e.svc, "another process": other.svc} {
		if _, err := svc.Resume(t.Context(), ResumeSpec{Run: live.ID}); !errors.Is(err, ErrStillRunning) ||
			!strings.Contains(err.Error(), "luft cancel") {
			t.Errorf("resume of a live run from %s: %v, want ErrStillRunning", name, err)
		}
	}
	live.Cancel()
	if res := live.Wait(); res.Status != StatusCancelled || res.Attempt != 1 {
		t.Fatalf("the live run: %s attempt %d", res.Status, res.Attempt)
	}
	k.release()

	// Now the newest unfinished run is the cancelled one; omitting the id resumes it.
	r := resume(t, other, ResumeSpec{})
	if r.ID != live.ID {
		t.Fatalf("resume without an id took %s, want the newest unfinished %s", r.ID, live.ID)
	}
	if res := r.Wait(); res.Status != StatusCompleted || res.Report != "re: block" {
		t.Fatalf("resumed: %s %v %v", res.Status, res.Report, res.Err)
	}
}

// runToEnd runs the workflow file path to its end and returns the run's id.
func runToEnd(t *testing.T, e *resumeEnv, path string, args any) string {
	t.Helper()
	r, err := e.svc.Start(t.Context(), Spec{Path: path, Args: args})
	if err != nil {
		t.Fatal(err)
	}
	r.Wait()
	return r.ID
}

func TestResumeChangedScript(t *testing.T) {
	const v1 = `function main()
  local a = agent{prompt="alpha"}
  local b = agent{prompt="beta"}
  local g = agent{prompt="gamma"}
  local z = agent{prompt="block"}
  report({a.output, b.output, g.output, z.output, a.cached, b.cached, g.cached})
end
`
	setup := func(t *testing.T) (*resumeEnv, *scripted, string, string) {
		dir := t.TempDir()
		path := writeScript(t, dir, "flow.lua", v1)
		b, k := blockingBackend("block", "")
		e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
		r, _, _ := startAndCancel(t, e, path, k)
		return e, b, path, r.ID
	}

	t.Run("refused, then allowed when the calls are unchanged", func(t *testing.T) {
		e, b, path, id := setup(t)
		writeScript(t, filepath.Dir(path), "flow.lua", "-- reworded\n"+v1)
		_, err := e.svc.Resume(t.Context(), ResumeSpec{Run: id})
		if !errors.Is(err, ErrScriptChanged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "--allow-changed-script") {
			t.Fatalf("resume of a changed script: %v, want ErrScriptChanged naming %s", err, path)
		}
		// RerunFromDivergence alone does not accept a changed script either.
		if _, err := e.svc.Resume(t.Context(), ResumeSpec{Run: id, RerunFromDivergence: true}); !errors.Is(err, ErrScriptChanged) {
			t.Fatalf("resume --rerun-from-divergence of a changed script: %v, want ErrScriptChanged", err)
		}
		if row := getRun(t, e.st, id); row.Status != storage.StatusCancelled || row.Attempt != 1 {
			t.Fatalf("a refused resume changed the run: %+v", row)
		}
		res := resume(t, e, ResumeSpec{Run: id, AllowChangedScript: true}).Wait()
		if res.Status != StatusCompleted || res.Agents != (Counts{OK: 1, Cached: 3}) {
			t.Fatalf("resume with --allow-changed-script: %s %v %+v", res.Status, res.Err, res.Agents)
		}
		if got := fmt.Sprint(res.Report); got != "[re: alpha re: beta re: gamma re: block true true true]" {
			t.Fatalf("report %s", got)
		}
		if asked(b, "alpha") != 1 || asked(b, "beta") != 1 || asked(b, "gamma") != 1 || asked(b, "block") != 2 {
			t.Fatalf("backend calls: %v", b.seen)
		}
	})

	t.Run("a changed prompt is a divergence, rerun from it on request", func(t *testing.T) {
		e, b, path, id := setup(t)
		writeScript(t, filepath.Dir(path), "flow.lua", strings.Replace(v1, `"beta"`, `"BETA"`, 1))
		r := resume(t, e, ResumeSpec{Run: id, AllowChangedScript: true})
		evs := collect(t, r)
		res := r.Wait()
		var se *lua.ScriptError
		if res.Status != StatusFailed || !errors.As(res.Err, &se) || se.Kind != lua.KindDivergence {
			t.Fatalf("resume after a prompt changed: %s %v, want a divergence failure", res.Status, res.Err)
		}
		for _, want := range []string{"main/2", "LUFT1001", path + ":3", "--rerun-from-divergence"} {
			if !strings.Contains(res.Err.Error(), want) {
				t.Errorf("divergence error %q does not name %s", res.Err, want)
			}
		}
		if done := evs[len(evs)-1]; done.Type != event.RunDone || !strings.Contains(fmt.Sprint(done.Data["error"]), "LUFT1001") {
			t.Errorf("run_done %v", done.Data)
		}
		if asked(b, "BETA") != 0 || asked(b, "gamma") != 1 {
			t.Fatalf("the diverged call or a later one ran: %v", b.seen)
		}
		if row := getRun(t, e.st, id); row.Status != storage.StatusFailed || !strings.Contains(row.Error, "LUFT1001") {
			t.Fatalf("row %+v", row)
		}

		r = resume(t, e, ResumeSpec{Run: id, AllowChangedScript: true, RerunFromDivergence: true})
		evs = collect(t, r)
		res = r.Wait()
		if res.Status != StatusCompleted {
			t.Fatalf("rerun from divergence: %s %v", res.Status, res.Err)
		}
		// alpha came before the divergence: cached. BETA diverged and gamma completed
		// after beta: both ran live, as did the never-finished block.
		if got := fmt.Sprint(res.Report); got != "[re: alpha re: BETA re: gamma re: block true false false]" {
			t.Fatalf("report %s", got)
		}
		if asked(b, "alpha") != 1 || asked(b, "BETA") != 1 || asked(b, "gamma") != 2 || asked(b, "block") != 2 {
			t.Fatalf("backend calls: %v", b.seen)
		}
		if res.Agents != (Counts{OK: 3, Cached: 1}) {
			t.Fatalf("counts %+v", res.Agents)
		}
		warned := false
		for _, ev := range ofType(evs, event.Log) {
			warned = warned || ev.Data["level"] == "warn" && strings.Contains(fmt.Sprint(ev.Data["msg"]), "main/2")
		}
		if !warned {
			t.Error("no warning names the call the rerun started from")
		}
	})

	t.Run("pcall cannot catch a divergence", func(t *testing.T) {
		e, b, path, id := setup(t)
		writeScript(t, filepath.Dir(path), "flow.lua", strings.Replace(v1,
			`local a = agent{prompt="alpha"}`, `local ok, a = pcall(agent, {prompt="ALPHA"}); if not ok then a = {output="caught"} end`, 1))
		res := waitRun(t, resume(t, e, ResumeSpec{Run: id, AllowChangedScript: true}))
		if res.Status != StatusFailed || lua.ErrorKindOf(res.Err) != lua.KindDivergence || !strings.Contains(res.Err.Error(), "main/1") {
			t.Fatalf("a divergence inside pcall: %s %v %v", res.Status, res.Report, res.Err)
		}
		if asked(b, "ALPHA") != 0 || asked(b, "beta") != 1 {
			t.Fatalf("backend calls: %v", b.seen)
		}
	})

	t.Run("a deleted script runs from its pinned copy", func(t *testing.T) {
		e, b, path, id := setup(t)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		res := waitRun(t, resume(t, e, ResumeSpec{Run: id}))
		if res.Status != StatusCompleted || res.Agents != (Counts{OK: 1, Cached: 3}) || asked(b, "gamma") != 1 {
			t.Fatalf("resume of a deleted script: %s %v %+v", res.Status, res.Err, res.Agents)
		}
	})
}

// startSubWorkflowRun writes, in dir/proj, a main.lua that runs the sub-workflow
// parts/sub.lua and then blocks, starts it with its state in dir/state, and cancels it at
// the block. It returns the env, the run, the backend, and the two scripts' paths.
func startSubWorkflowRun(t *testing.T, dir, proj string) (e *resumeEnv, r *Run, b *scripted, path, sub string) {
	t.Helper()
	path = writeScript(t, dir, filepath.Join(proj, "main.lua"), `function main()
  local s = workflow("parts/sub.lua")
  local z = agent{prompt="block"}
  report(s .. "|" .. z.output)
end`)
	sub = writeScript(t, dir, filepath.Join(proj, "parts/sub.lua"), `function main() report(agent{prompt="inner"}.output) end`)
	b, k := blockingBackend("block", "")
	e = openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	r, _, _ = startAndCancel(t, e, path, k)
	return e, r, b, path, sub
}

func TestResumeRefusesAChangedSubWorkflow(t *testing.T) {
	dir := t.TempDir()
	e, r, b, path, sub := startSubWorkflowRun(t, dir, "")
	files, err := e.st.Files(t.Context(), r.ID)
	if err != nil || len(files) != 2 || files[0].Path != path || files[1].Path != sub {
		t.Fatalf("pinned files %+v %v, want the script and its sub-workflow", files, err)
	}
	// Their copies are under runs/<id>/ too (SPEC §4).
	copies, err := os.ReadDir(filepath.Join(e.dir, "runs", r.ID))
	if err != nil || len(copies) != 2 {
		t.Fatalf("runs/<id>/ holds %d files %v, want 2", len(copies), err)
	}
	for _, c := range copies {
		b, _ := os.ReadFile(filepath.Join(e.dir, "runs", r.ID, c.Name()))
		if !slices.ContainsFunc(files, func(f storage.File) bool { return string(f.Content) == string(b) }) {
			t.Fatalf("runs/<id>/%s is not a pinned file: %q", c.Name(), b)
		}
	}

	writeScript(t, dir, "parts/sub.lua", "-- edited\n"+`function main() report(agent{prompt="inner"}.output) end`)
	_, err = e.svc.Resume(t.Context(), ResumeSpec{Run: r.ID})
	if !errors.Is(err, ErrScriptChanged) || !strings.Contains(err.Error(), sub) {
		t.Fatalf("resume after the sub-workflow changed: %v, want ErrScriptChanged naming %s", err, sub)
	}
	res := resume(t, e, ResumeSpec{Run: r.ID, AllowChangedScript: true}).Wait()
	if res.Status != StatusCompleted || res.Report != "re: inner|re: block" || asked(b, "inner") != 1 {
		t.Fatalf("resume with --allow-changed-script: %s %v %v (inner asked %d times)", res.Status, res.Report, res.Err, asked(b, "inner"))
	}
}

// A sub-workflow swapped for a symlink out of the script's folder after the run started is
// neither read nor pinned on resume, even with --allow-changed-script.
func TestResumeRefusesASubWorkflowSymlinkedOut(t *testing.T) {
	dir := t.TempDir()
	outside := writeScript(t, dir, "outside.lua", `function main() report("SECRET-OUTSIDE") end`)
	e, r, _, _, sub := startSubWorkflowRun(t, dir, "proj")
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, sub); err != nil {
		t.Fatal(err)
	}
	res := resume(t, e, ResumeSpec{Run: r.ID, AllowChangedScript: true}).Wait()
	if res.Status == StatusCompleted || res.Err == nil || !strings.Contains(res.Err.Error(), "leads outside the calling script's folder") {
		t.Fatalf("resume: %s %v %v, want the run to fail on the symlink", res.Status, res.Report, res.Err)
	}
	files, err := e.st.Files(t.Context(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.Contains(string(f.Content), "SECRET-OUTSIDE") {
			t.Fatalf("the file outside was pinned as %s", f.Path)
		}
	}
}

func TestCancelFromAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "flow.lua", oneThenBlock)
	b, k := blockingBackend("block", "")
	a := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	other := openResumeEnv(t, a.dir, b, os.Getppid())
	r, err := a.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-k.entered
	if _, err := other.svc.Cancel(t.Context(), r.ID[:13]); err != nil {
		t.Fatalf("cancel from another process: %v", err)
	}
	if yes, err := other.st.CancelRequested(t.Context(), r.ID); err != nil || !yes {
		t.Fatalf("no cancel request stored: %v", err)
	}
	res := waitRun(t, r)
	if res.Status != StatusCancelled || !errors.Is(res.Err, ErrCancelled) {
		t.Fatalf("after a cancel request from another process: %s %v", res.Status, res.Err)
	}
	k.release()
	row := getRun(t, other.st, r.ID)
	if row.Status != storage.StatusCancelled || !row.CancelRequested {
		t.Fatalf("row %+v, want cancelled with the request recorded", row)
	}
	// A second cancel is refused: the run is no longer running.
	if _, err := other.svc.Cancel(t.Context(), r.ID); err == nil || !strings.Contains(err.Error(), "already cancelled") {
		t.Fatalf("cancel of a cancelled run: %v", err)
	}

	// The resumed attempt does not inherit the old request.
	res = resume(t, other, ResumeSpec{Run: r.ID}).Wait()
	if res.Status != StatusCompleted || res.Report != "re: one|re: block" {
		t.Fatalf("resume after a cancel request: %s %v %v", res.Status, res.Report, res.Err)
	}
	if row := getRun(t, a.st, r.ID); row.CancelRequested || row.PID != os.Getppid() {
		t.Fatalf("row after resume: %+v", row)
	}

	// A running run nobody drives any more is marked cancelled at once.
	orphan(t, a.st, r.ID)
	if _, err := other.svc.Cancel(t.Context(), r.ID); err != nil {
		t.Fatal(err)
	}
	if row := getRun(t, a.st, r.ID); row.Status != storage.StatusCancelled || !strings.Contains(row.Error, "process had gone") {
		t.Fatalf("cancel of an orphaned run: %+v", row)
	}
}

func TestTwoProcessesOnOneStateDir(t *testing.T) {
	const n = 50
	dir := t.TempDir()
	path := writeScript(t, dir, "fan.lua", `function main()
  local items = {}
  for i = 1, `+fmt.Sprint(n)+` do items[i] = args.who .. " " .. i end
  local rs = parallel(items, function(p) return agent{prompt=p}.output end)
  report(#rs .. " " .. rs[`+fmt.Sprint(n)+`])
end`)
	// No call returns before both runs have one in flight, so they surely overlap.
	bothIn := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]bool{}
	b := &scripted{reply: func(ctx context.Context, req agent.Request, k int) (agent.Result, error) {
		mu.Lock()
		seen[strings.Fields(req.Prompt)[0]] = true
		if len(seen) == 2 && !seen["closed"] {
			seen["closed"] = true
			close(bothIn)
		}
		mu.Unlock()
		select {
		case <-bothIn:
		case <-ctx.Done():
			return agent.Result{}, ctx.Err()
		}
		return echo(ctx, req, k)
	}}
	state := filepath.Join(dir, "state")
	envs := []*resumeEnv{openResumeEnv(t, state, b, 0), openResumeEnv(t, state, b, os.Getppid())}
	var runs []*Run
	for i, e := range envs {
		r, err := e.svc.Start(t.Context(), Spec{Path: path, Args: map[string]any{"who": []string{"A", "B"}[i]}})
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}
	for i, r := range runs {
		res := r.Wait()
		want := fmt.Sprintf("%d re: %s %d", n, []string{"A", "B"}[i], n)
		if res.Status != StatusCompleted || res.Report != want || res.Agents.OK != n {
			t.Fatalf("run %d: %s %v %v %+v", i, res.Status, res.Report, res.Err, res.Agents)
		}
		// Read back through the other process's store.
		st := envs[1-i].st
		evs, err := st.Events(t.Context(), r.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for j, ev := range evs {
			if ev.Seq != int64(j+1) || ev.RunID != r.ID {
				t.Fatalf("run %d event %d: seq %d run %s", i, j, ev.Seq, ev.RunID)
			}
		}
		if evs[len(evs)-1].Type != event.RunDone || len(ofType(evs, event.AgentDone)) != n {
			t.Fatalf("run %d: %d events, last %s, %d agent_done", i, len(evs), evs[len(evs)-1].Type, len(ofType(evs, event.AgentDone)))
		}
		journal, err := st.Journal(t.Context(), r.ID)
		if err != nil || len(journal) != n {
			t.Fatalf("run %d journal: %d entries %v", i, len(journal), err)
		}
	}
	list, err := envs[0].svc.List(t.Context(), storage.ListOptions{})
	if err != nil || len(list) != 2 {
		t.Fatalf("list: %d runs %v", len(list), err)
	}
}

func TestCorruptOrMissingState(t *testing.T) {
	t.Run("garbage database", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, storage.DBFile)
		if err := os.WriteFile(file, []byte(strings.Repeat("this is not a database\n", 200)), 0o644); err != nil {
			t.Fatal(err)
		}
		st, err := storage.Open(t.Context(), dir)
		if err == nil {
			st.Close()
			t.Fatal("opened a garbage luft.db")
		}
		var ce *storage.CorruptError
		if !errors.Is(err, storage.ErrCorruptState) || !errors.As(err, &ce) || ce.File != file || !strings.Contains(err.Error(), file) {
			t.Fatalf("open of a garbage luft.db: %v, want ErrCorruptState naming %s", err, file)
		}
		// Nothing was deleted or overwritten.
		if b, _ := os.ReadFile(file); !strings.HasPrefix(string(b), "this is not a database") {
			t.Fatal("the corrupt file was changed")
		}
	})
	t.Run("missing database", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "fresh")
		e := openResumeEnv(t, dir, &scripted{reply: echo}, 0)
		if _, err := os.Stat(filepath.Join(dir, storage.DBFile)); err != nil {
			t.Fatalf("no database was created: %v", err)
		}
		if _, err := e.svc.Resume(t.Context(), ResumeSpec{}); !errors.Is(err, storage.ErrRunNotFound) {
			t.Fatalf("resume in an empty state dir: %v", err)
		}
		if _, err := e.svc.Status(t.Context(), "0190"); !errors.Is(err, storage.ErrRunNotFound) {
			t.Fatalf("status in an empty state dir: %v", err)
		}
	})
}

func TestEventsFollowFromAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "flow.lua", `function main()
  phase("only")
  local a = agent{prompt="one"}
  local b = agent{name="slow", prompt="wait"}
  report(a.output .. "|" .. b.output)
end`)
	release := make(chan struct{})
	b := &scripted{reply: func(ctx context.Context, req agent.Request, n int) (agent.Result, error) {
		if req.Prompt == "wait" {
			select {
			case <-release:
			case <-ctx.Done():
				return agent.Result{}, ctx.Err()
			}
		}
		return echo(ctx, req, n)
	}}
	a := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	other := openResumeEnv(t, a.dir, b, os.Getppid())
	r, err := a.svc.Start(t.Context(), Spec{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a guard against hanging, not a timing
	defer cancel()
	evs, errc, err := other.svc.Events(ctx, r.ID, EventsOptions{Follow: true, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	for ev := range evs {
		got = append(got, ev)
		if ev.Type == event.AgentStarted && ev.Data["name"] == "slow" {
			// While it runs: another process sees it running and not stale; this one
			// drives it.
			info, err := other.svc.Status(t.Context(), r.ID)
			if err != nil || info.Status != storage.StatusRunning || info.Stale || info.Live {
				t.Errorf("status from another process: %+v %v", info, err)
			}
			if info, _ := a.svc.Status(t.Context(), r.ID); !info.Live || info.Stale {
				t.Errorf("status from the driving process: live %v stale %v", info.Live, info.Stale)
			}
			close(release)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("the followed stream did not end at run_done")
	}
	if len(got) == 0 || got[len(got)-1].Type != event.RunDone || got[len(got)-1].Data["status"] != "completed" {
		t.Fatalf("followed stream ends with %v", got[len(got)-1])
	}
	for i, ev := range got {
		if ev.Seq != int64(i+1) {
			t.Fatalf("followed event %d has seq %d", i, ev.Seq)
		}
	}
	stored, _ := a.st.Events(t.Context(), r.ID, 0, 0)
	if len(stored) != len(got) {
		t.Fatalf("followed %d events, stored %d", len(got), len(stored))
	}
	row, err := other.svc.Wait(t.Context(), r.ID)
	if err != nil || row.Status != storage.StatusCompleted {
		t.Fatalf("wait from another process: %+v %v", row, err)
	}
	if ph, err := other.st.Phases(t.Context(), r.ID); err != nil || len(ph) != 1 || ph[0].Status != storage.PhaseDone || ph[0].OK != 2 {
		t.Fatalf("phases %+v %v", ph, err)
	}

	// A running row whose process is gone: stale, Wait and Follow return at once.
	orphan(t, a.st, r.ID)
	// (Not asked of a: its Service may still list the run as live for a moment after the
	// run ended.)
	info, err := other.svc.Status(t.Context(), r.ID)
	if err != nil || info.Status != storage.StatusInterrupted || !info.Stale || info.Live {
		t.Errorf("status of a running row with a dead pid: %s stale %v live %v %v", info.Status, info.Stale, info.Live, err)
	}
	if row, err := other.svc.Wait(ctx, r.ID); err != nil || row.Status != storage.StatusInterrupted {
		t.Fatalf("wait on a stale run: %+v %v", row, err)
	}
	evs, errc, err = other.svc.Events(ctx, r.ID, EventsOptions{Follow: true, Poll: 5 * time.Millisecond, Since: lastSeq(got) - 1})
	if err != nil {
		t.Fatal(err)
	}
	var tail []event.Event
	for ev := range evs {
		tail = append(tail, ev)
	}
	if err := <-errc; err != nil || ctx.Err() != nil || len(tail) != 1 || tail[0].Type != event.RunDone {
		t.Fatalf("follow of a stale run: %v %v %d events", err, ctx.Err(), len(tail))
	}
}

// A run started from source alone is pinned and resumed under "workflow.lua".
func TestResumeOfASourceOnlyRun(t *testing.T) {
	b, k := blockingBackend("block", "")
	e := openResumeEnv(t, t.TempDir(), b, 0)
	r, err := e.svc.Start(t.Context(), Spec{Source: []byte(`function main() agent{prompt="one"} report(agent{prompt="block"}.output) end`)})
	if err != nil {
		t.Fatal(err)
	}
	<-k.entered
	r.Cancel()
	r.Wait()
	k.release()
	r2, err := e.svc.Resume(t.Context(), ResumeSpec{Run: r.ID})
	if err != nil {
		t.Fatalf("resume of a run started from Source: %v", err)
	}
	if res := waitRun(t, r2); res.Status != StatusCompleted || res.Report != "re: block" || res.Agents.Cached != 1 {
		t.Fatalf("%s %v %v", res.Status, res.Report, res.Err)
	}
}

// After a resume with AllowChangedScript the new script is pinned: the next resume of the
// very script the last attempt ran is not refused as changed.
func TestResumeAllowedChangeIsPinned(t *testing.T) {
	dir := t.TempDir()
	const v1 = `function main() agent{prompt="one"} report(agent{prompt="block"}.output) end`
	path := writeScript(t, dir, "f.lua", v1)
	b, k := blockingBackend("block", "")
	e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	r, _, _ := startAndCancel(t, e, path, k)
	k.released.Store(false)
	const v2 = "-- v2\n" + v1
	writeScript(t, dir, "f.lua", v2)
	r2 := resume(t, e, ResumeSpec{Run: r.ID, AllowChangedScript: true})
	r2.Cancel()
	waitRun(t, r2)
	k.release()
	files, err := e.st.Files(t.Context(), r.ID)
	if err != nil || len(files) != 1 || string(files[0].Content) != v2 || files[0].SHA256 != getRun(t, e.st, r.ID).ScriptHash {
		t.Errorf("pinned script after an allowed change: %+v %v, want v2", files, err)
	}
	if _, err := e.svc.Resume(t.Context(), ResumeSpec{Run: r.ID}); err != nil {
		t.Errorf("resume of the script the last attempt ran: %v", err)
	}
}

// Two processes resuming the same stale run at once: the conditional claim lets exactly
// one of them drive it.
func TestConcurrentResumeHasOneWinner(t *testing.T) {
	dir := t.TempDir()
	path := writeScript(t, dir, "f.lua", `function main() agent{prompt="one"} report(agent{prompt="block"}.output) end`)
	b, k := blockingBackend("block", "")
	e := openResumeEnv(t, filepath.Join(dir, "state"), b, 0)
	o := openResumeEnv(t, e.dir, b, os.Getppid())
	r, _, _ := startAndCancel(t, e, path, k)
	k.released.Store(false)
	for try := range 20 {
		orphan(t, e.st, r.ID)
		var wg sync.WaitGroup
		var runs [2]*Run
		for i, x := range []*resumeEnv{e, o} {
			wg.Go(func() { runs[i], _ = x.svc.Resume(t.Context(), ResumeSpec{Run: r.ID}) })
		}
		wg.Wait()
		n := 0
		for _, run := range runs {
			if run != nil {
				n++
				run.Cancel()
				waitRun(t, run)
			}
		}
		if n != 1 {
			t.Fatalf("try %d: %d processes resumed the run at once, want exactly 1", try, n)
		}
	}
}
