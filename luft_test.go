package luft_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/luft-run/luft"
)

// newEngine opens an Engine over a fresh state dir, closed when the test ends.
func newEngine(t *testing.T, o luft.Options, more ...luft.Option) *luft.Engine {
	t.Helper()
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" } // no OPENAI_*, no LUFT_MOCK_* from the host
	}
	eng, err := luft.New(o, more...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// fanOut is a workflow of n agent calls in parallel, each logging a line.
func fanOut(n int) string {
	return fmt.Sprintf(`function main()
  local items = {}
  for i = 1, %d do items[i] = "item " .. i end
  local out = parallel(items, function(x)
    local r = agent{prompt=x}
    log("done " .. x)
    return r.output
  end)
  report(#out)
end`, n)
}

// drain reads a run's event stream to its end.
func drain(ch <-chan luft.Event) []luft.Event {
	var evs []luft.Event
	for ev := range ch {
		evs = append(evs, ev)
	}
	return evs
}

// checkStream fails unless evs is a whole attempt's stream: seq without gaps, from
// run_started to run_done.
func checkStream(t *testing.T, evs []luft.Event) {
	t.Helper()
	if len(evs) < 2 || evs[0].Type != luft.EventRunStarted || evs[len(evs)-1].Type != luft.EventRunDone {
		t.Fatalf("stream is not run_started .. run_done: %v", types(evs))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Seq != evs[i-1].Seq+1 {
			t.Fatalf("seq %d follows %d: an event is missing or out of order", evs[i].Seq, evs[i-1].Seq)
		}
	}
}

func types(evs []luft.Event) []luft.EventType {
	out := make([]luft.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

func count(evs []luft.Event, typ luft.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// A stream whose reader does not read until the run has ended (with a buffer of one
// event) still gets every event, in order; so does a reader that keeps up, and both see
// the same stream. The run is not held up by the slow reader: it ends first.
func TestEventsInOrderUnderBackpressure(t *testing.T) {
	eng := newEngine(t, luft.Options{EventBuffer: 1})
	run, err := eng.Start(t.Context(), luft.Script{Source: fanOut(40)})
	if err != nil {
		t.Fatal(err)
	}
	slow := run.Events() // not read until the run is over
	var fast []luft.Event
	fastDone := make(chan struct{})
	go func() {
		defer close(fastDone)
		fast = drain(run.Events())
	}()
	res, err := run.Wait()
	if err != nil || res.Status != luft.StatusCompleted {
		t.Fatalf("run: %s %v", res.Status, err)
	}
	late := drain(slow)
	<-fastDone
	checkStream(t, late)
	checkStream(t, fast)
	if !slices.EqualFunc(late, fast, func(a, b luft.Event) bool { return a.Seq == b.Seq && a.Type == b.Type }) {
		t.Fatalf("the two readers saw different streams:\n%v\n%v", types(late), types(fast))
	}
	if n := count(late, luft.EventAgentDone); n != 40 {
		t.Fatalf("%d agent_done events, want 40", n)
	}
	if n := count(late, luft.EventLog); n != 40 {
		t.Fatalf("%d log events, want 40", n)
	}
	// The stored stream is the same.
	var stored []luft.Event
	for ev, err := range eng.Events(t.Context(), run.ID(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, ev)
	}
	if len(stored) != len(late) || stored[len(stored)-1].Seq != late[len(late)-1].Seq {
		t.Fatalf("stored %d events, the stream had %d", len(stored), len(late))
	}
	// Events(since) starts after since.
	n := 0
	for ev, err := range eng.Events(t.Context(), run.ID(), stored[len(stored)-3].Seq) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Seq <= stored[len(stored)-3].Seq {
			t.Fatalf("Events(since=%d) yielded seq %d", stored[len(stored)-3].Seq, ev.Seq)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("Events after the third last yielded %d events, want 2", n)
	}
}

// A stream nobody reads to its end is closed when the Engine closes.
func TestEventsAbandonedStreamEndsOnClose(t *testing.T) {
	eng, err := luft.New(luft.Options{StateDir: t.TempDir(), EventBuffer: 1, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	run, err := eng.Start(t.Context(), luft.Script{Source: fanOut(5)})
	if err != nil {
		t.Fatal(err)
	}
	ch := run.Events()
	if ev := <-ch; ev.Type != luft.EventRunStarted {
		t.Fatalf("first event %s", ev.Type)
	}
	if _, err := run.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch { // must end: the Engine is closed
	}
}

// gate is a custom backend whose calls block until released, counting how many are in
// flight at once.
type gate struct {
	mu       sync.Mutex
	inFlight int
	most     int
	calls    int
	entered  chan string   // each call's prompt as it starts
	release  chan struct{} // closed to let every call answer
}

func newGate() *gate {
	return &gate{entered: make(chan string, 100), release: make(chan struct{})}
}

func (g *gate) Complete(ctx context.Context, req luft.Request) (luft.Response, error) {
	g.mu.Lock()
	g.inFlight++
	g.calls++
	g.most = max(g.most, g.inFlight)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}()
	g.entered <- req.Prompt
	select {
	case <-g.release:
		return luft.Response{Text: "ok " + req.Prompt, Usage: luft.Usage{Input: 2, Output: 1}}, nil
	case <-ctx.Done():
		return luft.Response{}, ctx.Err()
	}
}

func (g *gate) snapshot() (inFlight, most, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, g.most, g.calls
}

// A custom backend's calls are model turns the Engine's scheduler admits: with
// Concurrency 2, six parallel calls run two at a time, the other four queued in the
// scheduler (agent_queued) rather than in the backend.
func TestCustomBackendTurnsAreAdmitted(t *testing.T) {
	g := newGate()
	eng := newEngine(t, luft.Options{Concurrency: 2, Backend: "gated"}, luft.WithBackend("gated", g))
	run, err := eng.Start(t.Context(), luft.Script{Source: fanOut(6)})
	if err != nil {
		t.Fatal(err)
	}
	events := run.Events()
	<-g.entered
	<-g.entered
	for queued := 0; queued < 4; {
		ev, ok := <-events
		if !ok {
			t.Fatal("the stream ended before four turns were queued")
		}
		if ev.Type == luft.EventAgentQueued {
			queued++
		}
	}
	// Two calls hold the lane's two slots and four turns wait in the scheduler: none of
	// them can have reached the backend.
	if in, _, calls := g.snapshot(); in != 2 || calls != 2 {
		t.Fatalf("%d calls in flight, %d made, want 2 and 2 while four wait in the scheduler", in, calls)
	}
	close(g.release)
	res, err := run.Wait()
	if err != nil || res.Report != float64(6) {
		t.Fatalf("run: %v %v", res.Report, err)
	}
	for range events {
	}
	if _, most, calls := g.snapshot(); most != 2 || calls != 6 {
		t.Fatalf("at most %d calls at once over %d calls, want 2 over 6", most, calls)
	}
	if res.Usage.Total() != 6*3 {
		t.Fatalf("usage %+v, want the backend's 3 tokens a call", res.Usage)
	}

	// The control: with six slots, all six calls are in the backend at once.
	g6 := newGate()
	eng6 := newEngine(t, luft.Options{Concurrency: 6, Backend: "gated"}, luft.WithBackend("gated", g6))
	run6, err := eng6.Start(t.Context(), luft.Script{Source: fanOut(6)})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		<-g6.entered
	}
	close(g6.release)
	if _, err := run6.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Cancel by the Run, by the Engine (with an id prefix) and by the context Start was given:
// each ends the run as cancelled, the backend's call sees its context end, and the run
// resumes afterwards.
func TestCancel(t *testing.T) {
	for _, how := range []string{"run", "engine", "context"} {
		t.Run(how, func(t *testing.T) {
			g := newGate()
			eng := newEngine(t, luft.Options{Backend: "gated"}, luft.WithBackend("gated", g))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			run, err := eng.Start(ctx, luft.Script{Source: `function main()
  local r = agent{prompt="slow"}
  report(r.output)
end`})
			if err != nil {
				t.Fatal(err)
			}
			<-g.entered
			switch how {
			case "run":
				run.Cancel()
			case "engine":
				if err := eng.Cancel(t.Context(), run.ID()[:13]); err != nil {
					t.Fatal(err)
				}
			case "context":
				cancel()
			}
			res, err := run.Wait()
			if res.Status != luft.StatusCancelled || !errors.Is(err, luft.ErrCancelled) {
				t.Fatalf("after cancel: %s %v", res.Status, err)
			}
			if in, _, _ := g.snapshot(); in != 0 {
				t.Fatalf("%d backend calls still in flight after the run ended", in)
			}
			info, err := eng.Status(t.Context(), run.ID())
			if err != nil || info.Status != luft.StatusCancelled || info.Live {
				t.Fatalf("status after cancel: %+v %v", info, err)
			}
			if err := eng.Cancel(t.Context(), run.ID()); err == nil {
				t.Fatal("cancelling an ended run: no error")
			}
			close(g.release)
			again, err := eng.Resume(t.Context(), run.ID())
			if err != nil {
				t.Fatal(err)
			}
			if res, err := again.Wait(); err != nil || res.Report != "ok slow" || res.Attempt != 2 {
				t.Fatalf("resumed: %+v %v", res, err)
			}
		})
	}
}

// Resume of a completed run runs nothing and returns the stored result; its Events
// replays that attempt.
func TestResumeCompletedRunsNothing(t *testing.T) {
	eng := newEngine(t, luft.Options{})
	res, err := eng.Run(t.Context(), luft.Script{Source: `function main() report({n = 1}) end`})
	if err != nil {
		t.Fatal(err)
	}
	run, err := eng.Resume(t.Context(), res.RunID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := run.Wait()
	if err != nil || again.Status != luft.StatusCompleted || again.Attempt != 1 {
		t.Fatalf("resume of a completed run: %+v %v", again, err)
	}
	if rep, ok := again.Report.(map[string]any); !ok || rep["n"] != float64(1) {
		t.Fatalf("report %#v; want the stored one, as JSON decodes it", again.Report)
	}
	if rep := res.Report.(map[string]any); rep["n"] != float64(1) {
		t.Fatalf("live report %#v: numbers must decode as the stored report's do", res.Report)
	}
	checkStream(t, drain(run.Events()))
}

// blockOn is a backend that echoes every prompt except block, which hangs until its
// call is cancelled; entered is closed when it is first asked.
func blockOn(block string) (luft.Backend, <-chan struct{}) {
	entered := make(chan struct{})
	var once sync.Once
	return luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		if req.Prompt == block {
			once.Do(func() { close(entered) })
			<-ctx.Done()
			return luft.Response{}, ctx.Err()
		}
		return luft.Response{Text: "echo " + req.Prompt}, nil
	}), entered
}

// A workflow file changed since the run started: Resume refuses it, and with
// AllowChangedScript a call whose inputs changed is a *DivergenceError naming the call;
// RerunFromDivergence runs from that call on.
func TestResumeChangedScriptAndDivergence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flow.lua")
	write := func(first string) {
		src := fmt.Sprintf(`function main()
  local a = agent{prompt=%q}
  local b = agent{prompt="slow"}
  report(a.output .. "|" .. b.output)
end`, first)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("one")
	b, entered := blockOn("slow")
	dir := t.TempDir()
	eng, err := luft.New(luft.Options{StateDir: dir, Backend: "m"}, luft.WithBackend("m", b))
	if err != nil {
		t.Fatal(err)
	}
	run, err := eng.Start(t.Context(), luft.Script{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	run.Cancel()
	if _, err := run.Wait(); !errors.Is(err, luft.ErrCancelled) {
		t.Fatalf("first attempt: %v", err)
	}
	eng.Close()

	write("uno")
	eng = newEngine(t, luft.Options{StateDir: dir, Backend: "m"}, luft.WithBackend("m", luft.BackendFunc(
		func(ctx context.Context, req luft.Request) (luft.Response, error) {
			return luft.Response{Text: "echo " + req.Prompt}, nil
		})))
	if _, err := eng.Resume(t.Context(), run.ID()); !errors.Is(err, luft.ErrScriptChanged) {
		t.Fatalf("resume of a changed script: %v, want ErrScriptChanged", err)
	}
	again, err := eng.Resume(t.Context(), run.ID(), luft.ResumeOptions{AllowChangedScript: true})
	if err != nil {
		t.Fatal(err)
	}
	res, err := again.Wait()
	var de *luft.DivergenceError
	if !errors.As(err, &de) || de.CallKey != "main/1" || !strings.HasSuffix(de.Where, "flow.lua:2") || res.Status != luft.StatusFailed {
		t.Fatalf("resume with a changed first call: %s %v (%+v), want a divergence at main/1, flow.lua:2", res.Status, err, de)
	}
	again, err = eng.Resume(t.Context(), run.ID(), luft.ResumeOptions{AllowChangedScript: true, RerunFromDivergence: true})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := again.Wait(); err != nil || res.Report != "echo uno|echo slow" {
		t.Fatalf("rerun from divergence: %v %v", res.Report, err)
	}
}

// The accessors say what the Engine has: custom backends among the built-in ones, and the
// state dir as an absolute path.
func TestEngineAccessors(t *testing.T) {
	eng := newEngine(t, luft.Options{StateDir: filepath.Join(t.TempDir(), "rel", "..", "state")},
		luft.WithBackend("mine", luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
			return luft.Response{}, nil
		})))
	if got := eng.Backends(); !slices.Contains(got, "mine") || !slices.Contains(got, "mock") {
		t.Errorf("Backends() = %v", got)
	}
	if dir := eng.StateDir(); !filepath.IsAbs(dir) || filepath.Base(dir) != "state" {
		t.Errorf("StateDir() = %q", dir)
	}
	if _, err := os.Stat(filepath.Join(eng.StateDir(), "luft.db")); err != nil {
		t.Errorf("no luft.db in the state dir: %v", err)
	}
}

// Close while runs start and run: every Start either fails with ErrClosed or gives a run
// that ends (completed, or suspended by the Close) and can be resumed to completion.
func TestCloseWhileStarting(t *testing.T) {
	dir := t.TempDir()
	eng, err := luft.New(luft.Options{StateDir: dir, Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		id  string
		err error
	}
	out := make(chan outcome, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := eng.Run(t.Context(), luft.Script{Source: fanOut(3)})
			out <- outcome{res.RunID, err}
		}()
	}
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(out)
	var stopped []string
	for o := range out {
		switch {
		case o.err == nil:
		case errors.Is(o.err, luft.ErrClosed) && o.id == "":
		case errors.Is(o.err, luft.ErrShutdown) && o.id != "":
			stopped = append(stopped, o.id)
		default:
			t.Errorf("Run during Close: %q %v", o.id, o.err)
		}
	}
	again := newEngine(t, luft.Options{StateDir: dir})
	for _, id := range stopped {
		run, err := again.Resume(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if res, err := run.Wait(); err != nil || res.Report != float64(3) {
			t.Errorf("resume of %s after Close: %v %v", id, res.Report, err)
		}
	}
}

// A script that never yields (a pure Lua loop) is stopped by Cancel too.
func TestCancelStopsALuaLoop(t *testing.T) {
	eng := newEngine(t, luft.Options{})
	run, err := eng.Start(t.Context(), luft.Script{Source: "function main() local n = 0 while true do n = n + 1 end end"})
	if err != nil {
		t.Fatal(err)
	}
	events := run.Events()
	if ev := <-events; ev.Type != luft.EventRunStarted {
		t.Fatalf("first event %s", ev.Type)
	}
	run.Cancel()
	res, err := run.Wait()
	if res.Status != luft.StatusCancelled || !errors.Is(err, luft.ErrCancelled) {
		t.Fatalf("a Lua loop after Cancel: %s %v", res.Status, err)
	}
	for range events {
	}
}

// The config's [scheduler] slots bound a custom backend's calls like any lane's, unless
// Options.Concurrency is given; a config file is read from Options.ConfigPath.
func TestConfigSlotsBoundCustomBackend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "luft.toml")
	if err := os.WriteFile(path, []byte("[scheduler]\nslots = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		concurrency int
		want        int
	}{{0, 1}, {3, 3}} {
		g := newGate()
		eng := newEngine(t, luft.Options{ConfigPath: path, Concurrency: tc.concurrency, Backend: "gated"}, luft.WithBackend("gated", g))
		run, err := eng.Start(t.Context(), luft.Script{Source: fanOut(3 + tc.want)})
		if err != nil {
			t.Fatal(err)
		}
		events := run.Events()
		for range tc.want {
			<-g.entered
		}
		for queued := 0; queued < 3; {
			ev, ok := <-events
			if !ok {
				t.Fatal("the stream ended before three turns were queued")
			}
			if ev.Type == luft.EventAgentQueued {
				queued++
			}
		}
		if in, _, _ := g.snapshot(); in != tc.want {
			t.Fatalf("Concurrency %d: %d calls in flight with three queued, want %d", tc.concurrency, in, tc.want)
		}
		close(g.release)
		if _, err := run.Wait(); err != nil {
			t.Fatal(err)
		}
		for range events {
		}
		if _, most, _ := g.snapshot(); most != tc.want {
			t.Fatalf("Concurrency %d: at most %d at once, want %d", tc.concurrency, most, tc.want)
		}
	}
}
