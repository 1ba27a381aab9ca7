package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// newTestDaemon is a Daemon over a fresh state dir with the mock backend, not serving:
// its handler is driven by httptest.
func newTestDaemon(t testing.TB) (*Daemon, *runtime.Service) {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir, Backends: adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{}))})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	d.token = "secret"
	return d, svc
}

func call(t *testing.T, h http.Handler, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, "http://127.0.0.1:7878"+path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

// Runs started through the API list newest first, a page at a time, filtered by status
// and workflow; bad requests say what is wrong.
func TestAPIStartListPages(t *testing.T) {
	d, svc := newTestDaemon(t)
	h := d.handler(false)
	var ids []string
	for i := range 7 {
		name := "a.lua"
		if i%2 == 1 {
			name = "b.lua"
		}
		code, body := call(t, h, "POST", "/api/runs", `{"script":"function main() report(agent{prompt='x'}.ok) end","path":"`+name+`","class":"batch"}`)
		if code != http.StatusCreated {
			t.Fatalf("start: HTTP %d %s", code, body)
		}
		var out struct {
			RunID string `json:"run_id"`
		}
		_ = json.Unmarshal([]byte(body), &out)
		ids = append(ids, out.RunID)
	}
	for _, id := range ids {
		if _, err := svc.Wait(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		code, body := call(t, h, "GET", "/api/runs?limit=3&cursor="+cursor, "")
		var page RunPage
		if code != 200 || json.Unmarshal([]byte(body), &page) != nil {
			t.Fatalf("page %d: HTTP %d %s", pages, code, body)
		}
		for _, r := range page.Runs {
			got = append(got, r.ID)
			if r.Status != "completed" || !r.HasReport {
				t.Errorf("run %s: %+v", r.ID, r)
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(got) != 7 || got[0] != ids[6] || got[6] != ids[0] {
		t.Errorf("pages gave %v, want the 7 runs newest first (%v)", got, ids)
	}
	for _, tc := range []struct {
		path string
		code int
		want string
	}{
		{"/api/runs?workflow=b.lua", 200, ids[5]},
		{"/api/runs?status=failed", 200, `"runs":[]`},
		{"/api/runs?limit=0", 400, "want a whole number from 1 to 1000"},
		{"/api/runs?cursor=nope", 400, "is not a run of this list"},
		{"/api/runs/" + ids[0], 200, `"phases":[]`},
		{"/api/runs/" + ids[0] + "/report", 200, "true"},
		{"/api/runs/nope", 404, "nope"},
		{"/api/runs/" + ids[0] + "/events?types=run_done", 200, `"type":"run_done"`},
		{"/api/runs/" + ids[0] + "/events?since=x", 400, "want a seq >= 0"},
		{"/api/daemon", 200, `"runs_hosted":7`},
	} {
		if code, body := call(t, h, "GET", tc.path, ""); code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s: HTTP %d, want %d with %q\n%s", tc.path, code, tc.code, tc.want, body)
		}
	}
	if _, body := call(t, h, "GET", "/api/runs?workflow=b.lua", ""); strings.Contains(body, ids[0]) {
		t.Errorf("workflow filter let a.lua through:\n%s", body)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"path":"x.lua","class":"urgent"}`, `invalid class \"urgent\"`},
		{`{}`, "give the workflow as script"},
		{`{"script":"function main( end"}`, "syntax"},
		{`{"script":"x","colour":"red"}`, `unknown field \"colour\"`},
	} {
		if code, body := call(t, h, "POST", "/api/runs", tc.body); code != 400 || !strings.Contains(body, tc.want) {
			t.Errorf("start %s: HTTP %d %s, want 400 with %s", tc.body, code, body, tc.want)
		}
	}
	if code, body := call(t, h, "POST", "/api/runs/"+ids[0]+"/cancel", ""); code != http.StatusConflict || !strings.Contains(body, "already completed") {
		t.Errorf("cancel a finished run: HTTP %d %s", code, body)
	}
	d.stopping.Store(true)
	if code, body := call(t, h, "POST", "/api/runs", `{"script":"function main() end"}`); code != http.StatusServiceUnavailable {
		t.Errorf("start while stopping: HTTP %d %s", code, body)
	}
}

// Over HTTP: the token, a loopback Host and a loopback Origin are required.
func TestAPIHTTPGuards(t *testing.T) {
	d, _ := newTestDaemon(t)
	h := d.handler(true)
	for _, tc := range []struct {
		name string
		hdr  []string
		code int
	}{
		{"no token", nil, 401},
		{"wrong scheme", []string{"Authorization", "Basic secret"}, 401},
		{"token", []string{"Authorization", "Bearer secret"}, 200},
		{"foreign origin", []string{"Authorization", "Bearer secret", "Origin", "https://example.com"}, 403},
		{"loopback origin", []string{"Authorization", "Bearer secret", "Origin", "http://[::1]:8080"}, 200},
	} {
		if code, body := call(t, h, "GET", "/api/daemon", "", tc.hdr...); code != tc.code {
			t.Errorf("%s: HTTP %d, want %d: %s", tc.name, code, tc.code, body)
		}
	}
	req := httptest.NewRequest("GET", "http://rebound.example:7878/api/daemon", nil)
	req.Header.Set("Authorization", "Bearer secret")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 403 {
		t.Errorf("a rebinding Host: HTTP %d, want 403", rec.Code)
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST": true, "127.0.0.1": true, "127.1.2.3": true, "::1": true, "[::1]": true,
		"0.0.0.0": false, "192.168.1.4": false, "example.com": false, "localhost.evil.com": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// The log rotates to .1 when a write would pass the limit, keeping at most two files.
func TestRotatingLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "daemon.log")
	l, err := OpenLog(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 39) + "\n"
	for range 7 {
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	cur, _ := os.ReadFile(path)
	old, _ := os.ReadFile(path + ".1")
	if len(cur) != 40 || len(old) != 80 {
		t.Errorf("after 7 writes of 40 bytes with a 100-byte limit: log %d bytes, log.1 %d bytes; want 40 and 80", len(cur), len(old))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v, want 0600", fi.Mode())
	}
}

// A second daemon on the same state dir is refused while the first holds it.
func TestSecondDaemonRefused(t *testing.T) {
	d, svc := newTestDaemon(t)
	ready := make(chan Info, 1)
	d.opts.Ready = func(i Info) { ready <- i }
	errc := make(chan error, 1)
	go func() { errc <- d.Run(context.Background()) }()
	info := <-ready
	// flock locks belong to the open file, so a second open in this process conflicts as
	// another process would.
	d2, err := New(Options{StateDir: d.opts.StateDir, Service: svc, Store: d.opts.Store})
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already runs for this state dir: pid") ||
		!strings.Contains(err.Error(), info.Socket) {
		t.Errorf("second daemon: %v", err)
	}
	c, err := Dial(context.Background(), d.opts.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	d.Shutdown()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	c.Close()
	d.lock.Close()
	if _, err := os.Stat(info.Socket); !os.IsNotExist(err) {
		t.Errorf("socket left after shutdown: %v", err)
	}
}

// A hosted run's events are followed live: the stream ends with its run_done, and a type
// filter applies.
func TestAPIFollowHostedRun(t *testing.T) {
	d, _ := newTestDaemon(t)
	h := d.handler(false)
	release := make(chan struct{})
	svc, err := runtime.New(runtime.Options{Store: d.opts.Store, Backends: adapters.NewRegistry("mock", adapters.NewMock(adapters.MockConfig{Fail: "hang"}))})
	if err != nil {
		t.Fatal(err)
	}
	d.opts.Service = svc
	_, body := call(t, h, "POST", "/api/runs", `{"script":"function main() log('before') agent{prompt='x'} end","path":"f.lua"}`)
	var out struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal([]byte(body), &out)
	go func() {
		<-release
		_, _ = svc.Cancel(context.Background(), out.RunID)
	}()
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/api/runs/"+out.RunID+"/events?types=log,run_done", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	for !strings.Contains(string(buf[:n]), "event: log") {
		m, err := resp.Body.Read(buf[n:])
		if err != nil {
			t.Fatalf("stream ended before the log event: %v\n%s", err, buf[:n])
		}
		n += m
	}
	close(release) // the run is cancelled only now: the log event came while it ran
	rest, _ := io.ReadAll(resp.Body)
	all := string(buf[:n]) + string(rest)
	if strings.Count(all, "\nevent: ") != 2 || !strings.Contains(all, "event: run_done") || !strings.Contains(all, `"status":"cancelled"`) {
		t.Errorf("followed stream:\n%s", all)
	}
}

// held is a backend whose turns, once admitted, say they started and then wait until the
// test lets one through (or the run is stopped).
type held struct {
	started chan struct{}
	release chan struct{}
}

func (h *held) ID() string { return "held" }

func (h *held) Run(ctx context.Context, req agent.Request, call adapters.Call) (agent.Result, error) {
	err := call.Do(ctx, adapters.TurnCost{}, func(ctx context.Context) adapters.TurnReport {
		h.started <- struct{}{}
		select {
		case <-h.release:
			return adapters.TurnReport{}
		case <-ctx.Done():
			return adapters.TurnReport{Err: context.Cause(ctx)}
		}
	})
	if err != nil {
		return agent.Result{}, err
	}
	return agent.Result{Status: agent.StatusOK, Text: "ok", Backend: "held"}, nil
}

// On shutdown a turn already admitted finishes (and is journaled) within the grace
// period; the next is never admitted; the run ends suspended.
func TestShutdownLetsAdmittedTurnsFinish(t *testing.T) {
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	gate := NewGate()
	b := &held{started: make(chan struct{}, 2), release: make(chan struct{})}
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir,
		Backends:  adapters.NewRegistry("held", b),
		Scheduler: gate.Wrap(scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 4}}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Gate: gate, Grace: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	run, err := d.start(context.Background(), StartRequest{Path: "two.lua", Script: `function main() agent{prompt = "a"} agent{prompt = "b"} end`})
	if err != nil {
		t.Fatal(err)
	}
	// The first turn is admitted and held; shutdown closes the gate, then the turn ends.
	<-b.started
	drained := make(chan struct{})
	go func() {
		d.drain()
		close(drained)
	}()
	<-gate.closed
	b.release <- struct{}{}
	<-drained
	if n := len(b.started); n != 0 {
		t.Errorf("%d turns were admitted after the gate closed", n)
	}
	res := run.Wait()
	entries, _ := st.Journal(context.Background(), run.ID)
	done := map[string]string{}
	for _, e := range entries {
		done[e.CallKey] = e.Status
	}
	if res.Status != runtime.StatusSuspended || done["main/1"] != storage.EntryCompleted || done["main/2"] == storage.EntryCompleted {
		t.Errorf("after shutdown: run %s (%v), journal %v; want suspended with main/1 completed and main/2 not", res.Status, res.Err, done)
	}
	stopped, stop := context.WithCancel(context.Background())
	stop()
	if _, err := gate.Wrap(nil).Admit(stopped, scheduler.Turn{}); err == nil {
		t.Error("a closed gate admitted a turn")
	}
}

// shutdownFixture is a daemon whose runs call the held backend through a Gate in front
// of a scheduler with the given slots.
func shutdownFixture(t *testing.T, slots int) (*Daemon, *Gate, *held, storage.Store) {
	t.Helper()
	dir := t.TempDir()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	gate := NewGate()
	b := &held{started: make(chan struct{}, 8), release: make(chan struct{})}
	svc, err := runtime.New(runtime.Options{Store: st, StateDir: dir,
		Backends:  adapters.NewRegistry("held", b),
		Scheduler: gate.Wrap(scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: slots}}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{StateDir: dir, Service: svc, Store: st, Gate: gate, Grace: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return d, gate, b, st
}

// drainWhileHeld shuts d down while one turn is held, lets that turn finish once the
// gate is closed, and waits for the shutdown to end.
func drainWhileHeld(d *Daemon, gate *Gate, b *held) {
	<-b.started
	drained := make(chan struct{})
	go func() {
		d.drain()
		close(drained)
	}()
	<-gate.closed
	b.release <- struct{}{}
	<-drained
}

// A turn waiting in the scheduler's queue when shutdown is asked is not admitted: only
// the admitted one finishes, and the run ends suspended without the rest.
func TestShutdownAdmitsNoQueuedTurn(t *testing.T) {
	d, gate, b, st := shutdownFixture(t, 1)
	run, err := d.start(context.Background(), StartRequest{Path: "fan.lua", Script: `function main()
  parallel({1, 2, 3}, function(i) return agent{prompt = "a" .. i} end)
end`})
	if err != nil {
		t.Fatal(err)
	}
	// The first turn is held; the other two wait in the scheduler's queue.
	deadline := time.Now().Add(time.Minute)
	for queued(d) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the other two turns never queued (%d queued)", queued(d))
		}
		time.Sleep(time.Millisecond) // polls a condition; no timing is asserted
	}
	drainWhileHeld(d, gate, b)
	if n := len(b.started); n != 0 {
		t.Errorf("%d queued turns were admitted after shutdown was asked", n)
	}
	res := run.Wait()
	entries, _ := st.Journal(context.Background(), run.ID)
	completed := 0
	for _, e := range entries {
		if e.Status == storage.EntryCompleted {
			completed++
		}
	}
	if res.Status != runtime.StatusSuspended || completed != 1 {
		t.Errorf("after shutdown: run %s (%v), %d calls completed; want suspended with 1", res.Status, res.Err, completed)
	}
}

// A run whose admitted turn finishes after shutdown was asked does not go on into its
// next phase: it is suspended there, and the phase starts when the run resumes.
func TestShutdownStartsNoNewPhase(t *testing.T) {
	d, gate, b, st := shutdownFixture(t, 4)
	run, err := d.start(context.Background(), StartRequest{Path: "phases.lua", Script: `function main()
  phase("one")
  agent{prompt = "a"}
  phase("two")
  agent{prompt = "b"}
end`})
	if err != nil {
		t.Fatal(err)
	}
	drainWhileHeld(d, gate, b)
	res := run.Wait()
	evs, err := st.EventsOfType(context.Background(), run.ID, 0, 0, []string{event.PhaseStarted, event.PhaseDone})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ev := range evs {
		seen = append(seen, fmt.Sprintf("%s %v", ev.Type, ev.Data["label"]))
	}
	want := []string{event.PhaseStarted + " one", event.PhaseDone + " one"}
	if res.Status != runtime.StatusSuspended || strings.Join(seen, ", ") != strings.Join(want, ", ") {
		t.Errorf("after shutdown: run %s (%v), phase events %q; want suspended with %q", res.Status, res.Err, seen, want)
	}
	if len(b.started) != 0 {
		t.Errorf("a turn of the next phase was admitted after shutdown was asked")
	}
}

// POST /api/daemon/shutdown with grace_ms shuts down with that grace, not the daemon's
// own, and says which it has; a negative one is refused.
func TestShutdownGraceOfTheRequest(t *testing.T) {
	d, _, _, _ := shutdownFixture(t, 1)
	h := d.handler(false)
	post := func(body string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/api/daemon/shutdown", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := post(`{"grace_ms": -5}`); rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "negative") {
		t.Errorf("negative grace: HTTP %d %s", rec.Code, rec.Body)
	}
	rec := post(`{"grace_ms": 1500}`)
	var reply ShutdownReply
	if err := json.Unmarshal(rec.Body.Bytes(), &reply); err != nil || rec.Code != http.StatusAccepted || reply.GraceMS != 1500 {
		t.Fatalf("shutdown: HTTP %d %s (%v); want 202 with grace_ms 1500", rec.Code, rec.Body, err)
	}
	if g := d.grace(); g != 1500*time.Millisecond {
		t.Errorf("the shutdown has grace %s, want 1.5s (the daemon's own is 20s)", g)
	}
	// Asked again, the first request's grace stands.
	if rec := post(`{"grace_ms": 9}`); !strings.Contains(rec.Body.String(), `"grace_ms":1500`) {
		t.Errorf("second shutdown: %s; want the first one's grace", rec.Body)
	}
}

// queued is how many turns wait in d's scheduler queue.
func queued(d *Daemon) int {
	st, _ := d.opts.Service.SchedulerStats()
	n := 0
	for _, l := range st.Lanes {
		n += l.QueuedInteractive + l.QueuedBatch
	}
	return n
}
