package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/luft-run/luft/daemon"
	"github.com/luft-run/luft/event"
	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/runtime"
	"github.com/luft-run/luft/storage"
)

// daemonTest is a temp dir with a state dir whose daemon every test stops at its end (and
// kills, should it not stop), so no daemon outlives the suite.
type daemonTest struct {
	t     *testing.T
	dir   string // working dir of every luft process
	state string
	env   []string
	pids  map[int]bool // every daemon pid seen
}

func newDaemonTest(t *testing.T, env ...string) *daemonTest {
	t.Helper()
	dir := t.TempDir()
	dt := &daemonTest{t: t, dir: dir, state: filepath.Join(dir, "st"), env: env, pids: map[int]bool{}}
	t.Cleanup(dt.cleanup)
	return dt
}

// luft runs luft in the test's dir against its state dir.
func (dt *daemonTest) luft(args ...string) (string, string, int) {
	dt.t.Helper()
	return luftIn(dt.t, dt.dir, dt.env, append([]string{"--state-dir", dt.state}, args...)...)
}

// start starts the daemon (detached) and returns its info.
func (dt *daemonTest) start(args ...string) daemon.Info {
	dt.t.Helper()
	out, errOut, code := dt.luft(append([]string{"daemon", "start"}, args...)...)
	if code != 0 || !strings.Contains(out, "luft daemon started: pid ") {
		dt.t.Fatalf("daemon start: exit %d\n%s%s", code, out, errOut)
	}
	info, err := daemon.ReadInfo(dt.state)
	if err != nil {
		dt.t.Fatalf("daemon started but %s is unreadable: %v", daemon.InfoFile, err)
	}
	dt.pids[info.PID] = true
	return info
}

func (dt *daemonTest) cleanup() {
	if _, err := os.Stat(filepath.Join(dt.state, daemon.SocketFile)); err == nil {
		_, _, _ = luftIn(dt.t, dt.dir, dt.env, "--state-dir", dt.state, "daemon", "stop")
	}
	for pid := range dt.pids {
		// The kernel frees the daemon's lock (which daemon stop waits for) a moment
		// before the exiting process turns into a zombie: give it that moment.
		for deadline := time.Now().Add(30 * time.Second); processRunning(pid) && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond) // an external process
		}
		if processRunning(pid) {
			dt.t.Errorf("daemon pid %d still runs after stop: killing it", pid)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// processRunning reports whether pid is a live process (a zombie waiting to be reaped
// by init is not).
func processRunning(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// kill SIGKILLs the daemon and waits until its lock is free (the process is gone).
func (dt *daemonTest) kill(pid int) {
	dt.t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		dt.t.Fatalf("kill daemon %d: %v", pid, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := daemon.WaitGone(ctx, dt.state); err != nil {
		dt.t.Fatalf("daemon %d still holds the state dir after SIGKILL: %v", pid, err)
	}
}

// A daemon starts detached, refuses a second one (naming the first), hosts detached and
// attached runs, shows its status, and stops.
func TestDaemonLifecycle(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=20")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main()
  local n = 0
  for i = 1, 4 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({steps = n})
end`})
	info := dt.start()
	if out, errOut, code := dt.luft("daemon", "start"); code != 1 || !strings.Contains(errOut, fmt.Sprintf("already runs for this state dir: pid %d, socket %s", info.PID, info.Socket)) {
		t.Errorf("second start: exit %d, want 1 naming pid %d\n%s%s", code, info.PID, out, errOut)
	}
	if fi, err := os.Stat(info.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v, mode %v; want 0600", info.Socket, err, fi.Mode())
	}
	id, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
	id = strings.TrimSpace(id)
	if code != 0 || len(id) != 36 {
		t.Fatalf("run --detach: exit %d, stdout %q\n%s", code, id, errOut)
	}
	out, errOut, code := dt.luft("attach", id, "--no-tui")
	if code != 0 || !strings.Contains(out, `"steps": 4`) || !strings.Contains(errOut, "completed") {
		t.Errorf("attach: exit %d\n%s%s", code, out, errOut)
	}
	// Attached luft run is hosted by the daemon too: the daemon's pid owns it.
	out, errOut, code = dt.luft("run", "--no-tui", "-w", "wf.lua")
	if code != 0 || !strings.Contains(out, `"steps": 4`) {
		t.Errorf("run through the daemon: exit %d\n%s%s", code, out, errOut)
	}
	// A report path that cannot be written is refused before the daemon hosts the run
	// (the status below still counts 2 hosted runs).
	if _, errOut, code := dt.luft("run", "--no-tui", "-w", "wf.lua", "-o", "nodir/r.json"); code != 2 || !strings.Contains(errOut, "the folder nodir does not exist") {
		t.Errorf("run -o into a missing folder through the daemon: exit %d, want 2\n%s", code, errOut)
	}
	out, _, _ = dt.luft("daemon", "status", "--json")
	var st daemon.StatusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.PID != info.PID || st.RunsHosted != 2 || len(st.Lanes) == 0 || st.Lanes[0].Admitted != 8 {
		t.Errorf("daemon status --json: %v\n%s", err, out)
	}
	out, _, _ = dt.luft("daemon", "status")
	for _, want := range []string{fmt.Sprintf("pid        %d", info.PID), "runs       2 hosted, 0 running", "lane       mock/"} {
		if !strings.Contains(out, want) {
			t.Errorf("daemon status lacks %q:\n%s", want, out)
		}
	}
	// list and status read the same store with or without the daemon.
	out, _, _ = dt.luft("status", id, "--json")
	if !strings.Contains(out, `"status": "completed"`) || !strings.Contains(out, fmt.Sprintf(`"pid": %d`, info.PID)) {
		t.Errorf("status of a hosted run:\n%s", out)
	}
	if out, errOut, code := dt.luft("daemon", "stop"); code != 0 || !strings.Contains(out, "stopped") {
		t.Errorf("daemon stop: exit %d\n%s%s", code, out, errOut)
	}
	// stop returns once the daemon has let go of its lock, which it does as it exits;
	// the kernel may take a moment more to finish the exit (an external process).
	for deadline := time.Now().Add(30 * time.Second); processRunning(info.PID) && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if processRunning(info.PID) {
		t.Errorf("daemon pid %d still runs after stop returned", info.PID)
	}
	if _, errOut, code := dt.luft("daemon", "status"); code != 1 || !strings.Contains(errOut, "no luft daemon runs for this state dir") {
		t.Errorf("status after stop: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua"); code != 1 || !strings.Contains(errOut, "start one with luft daemon start") {
		t.Errorf("run --detach without a daemon: exit %d\n%s", code, errOut)
	}
	log, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile))
	if !strings.Contains(string(log), "ended completed") || !strings.Contains(string(log), "stopped") {
		t.Errorf("daemon.log:\n%s", log)
	}
}

// detach → attach → Ctrl-C detaches (the run goes on) → cancel → attach shows it cancelled.
func TestDaemonDetachAttachCancel(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=60000")
	writeFiles(t, dt.dir, map[string]string{"slow.lua": `function main() report(agent{prompt = "a long one"}.text) end`})
	info := dt.start()
	id, errOut, code := dt.luft("run", "--detach", "-w", "slow.lua")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("run --detach: exit %d\n%s", code, errOut)
	}
	cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "attach", id, "--no-tui")
	cmd.Dir, cmd.Env = dt.dir, testEnv(nil, dt.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait for the agent to be shown running, then interrupt the view.
	lines := bufio.NewScanner(stderr)
	seen := make(chan string, 1)
	go func() {
		var all strings.Builder
		for lines.Scan() {
			all.WriteString(lines.Text() + "\n")
			if strings.Contains(lines.Text(), "▸ main/1") {
				seen <- ""
			}
		}
		seen <- all.String()
	}()
	select {
	case <-seen:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("attach never showed the running agent")
	}
	_ = cmd.Process.Signal(os.Interrupt)
	rest := <-seen
	if err := cmd.Wait(); err != nil || !strings.Contains(rest, "detached from run "+id+"; it goes on") {
		t.Errorf("attach after Ctrl-C: %v\n%s", err, rest)
	}
	if out, _, _ := dt.luft("status", id, "--json"); !strings.Contains(out, `"status": "running"`) {
		t.Errorf("the run stopped when the view detached:\n%s", out)
	}
	if out, errOut, code := dt.luft("cancel", id); code != 0 {
		t.Fatalf("cancel: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = dt.luft("attach", id, "--no-tui")
	if code != 3 || !strings.Contains(errOut, "cancelled") {
		t.Errorf("attach after cancel: exit %d, want 3\n%s", code, errOut)
	}
	// A resume goes to the daemon too.
	out, errOut, code := dt.luft("run", "--resume", id, "--detach")
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("run --resume --detach: exit %d\n%s%s", code, out, errOut)
	}
	if out, _, _ := dt.luft("status", id, "--json"); !strings.Contains(out, `"attempt": 2`) || !strings.Contains(out, fmt.Sprintf(`"pid": %d`, info.PID)) {
		t.Errorf("the resumed run is not hosted by the daemon (pid %d):\n%s", info.PID, out)
	}
	if _, errOut, code := dt.luft("run", "--resume", id); code != 2 || !strings.Contains(errOut, "still running it") {
		t.Errorf("resume of a hosted running run: exit %d, want 2\n%s", code, errOut)
	}
	if _, errOut, code := dt.luft("run", "--resume", "ffffffff"); code != 2 || !strings.Contains(errOut, "luft list shows your runs") {
		t.Errorf("resume of an unknown run: exit %d, want 2\n%s", code, errOut)
	}
	dt.luft("cancel", id)

	// An attached luft run hosted by the daemon: Ctrl-C cancels the run (exit 3), as it
	// does for a run in the calling process.
	run := exec.Command(luftBinary(t), "--state-dir", dt.state, "run", "--no-tui", "-w", "slow.lua")
	run.Dir, run.Env = dt.dir, testEnv(nil, dt.env...)
	runErr, err := run.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(runErr)
	var all strings.Builder
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		if strings.Contains(sc.Text(), "▸ main/1") {
			_ = run.Process.Signal(os.Interrupt)
		}
	}
	err = run.Wait()
	if code := run.ProcessState.ExitCode(); code != 3 || !strings.Contains(all.String(), "cancelled") {
		t.Errorf("Ctrl-C on a hosted luft run: exit %d (%v), want 3\n%s", code, err, all.String())
	}
}

// The HTTP API needs the bearer token and a loopback Host and Origin; a non-loopback
// address needs LUFT_TOKEN. Events stream as SSE and resume after Last-Event-ID.
func TestDaemonHTTPToken(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t)
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main() report(agent{prompt = "hi"}.ok) end`})
	if _, errOut, code := dt.luft("daemon", "start", "--listen", "0.0.0.0:0"); code != 1 || !strings.Contains(errOut, "is not a loopback address: set LUFT_TOKEN") {
		t.Errorf("non-loopback without a token: exit %d\n%s", code, errOut)
	}
	info := dt.start("--listen", "127.0.0.1:0")
	tok, err := os.ReadFile(filepath.Join(dt.state, daemon.TokenFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(dt.state, daemon.TokenFile)); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode())
	}
	token := strings.TrimSpace(string(tok))
	out := mustLuft(t, dt.dir, dt.env, "--state-dir", dt.state, "run", "-q", "-w", "wf.lua")
	if strings.TrimSpace(out) != "true" {
		t.Fatalf("run: %q", out)
	}
	base := "http://" + info.Addr
	get := func(path string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	auth := "Bearer " + token
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
		body string
	}{
		{"no token", nil, 401, "missing or wrong bearer token"},
		{"wrong token", map[string]string{"Authorization": "Bearer nope"}, 401, "missing or wrong bearer token"},
		{"rebinding host", map[string]string{"Authorization": auth, "Host": "evil.example:80"}, 403, "not a loopback name"},
		{"cross-site origin", map[string]string{"Authorization": auth, "Origin": "http://evil.example"}, 403, "cross-site requests are refused"},
		{"token", map[string]string{"Authorization": auth}, 200, `"status":"completed"`},
		{"token and local origin", map[string]string{"Authorization": auth, "Origin": "http://localhost:1234"}, 200, `"runs"`},
	} {
		if code, body := get("/api/runs", tc.hdr); code != tc.want || !strings.Contains(body, tc.body) {
			t.Errorf("%s: HTTP %d, want %d with %q\n%s", tc.name, code, tc.want, tc.body, body)
		}
	}
	var page daemon.RunPage
	_, body := get("/api/runs?limit=1", map[string]string{"Authorization": auth})
	if err := json.Unmarshal([]byte(body), &page); err != nil || len(page.Runs) != 1 {
		t.Fatalf("list: %v\n%s", err, body)
	}
	id := page.Runs[0].ID
	if code, body := get("/api/runs/"+id+"/report", map[string]string{"Authorization": auth}); code != 200 || strings.TrimSpace(body) != "true" {
		t.Errorf("report: HTTP %d %s", code, body)
	}
	// SSE: every event with its seq as id; after Last-Event-ID only the later ones.
	code, all := get("/api/runs/"+id+"/events", map[string]string{"Authorization": auth, "Accept": "text/event-stream"})
	if code != 200 || !strings.Contains(all, "id: 1\nevent: run_started\n") || !strings.Contains(all, "event: run_done\n") {
		t.Fatalf("SSE: HTTP %d\n%s", code, all)
	}
	n := strings.Count(all, "\nevent: ")
	_, later := get("/api/runs/"+id+"/events", map[string]string{"Authorization": auth, "Accept": "text/event-stream", "Last-Event-ID": "2"})
	if strings.Contains(later, "id: 2\n") || !strings.HasPrefix(later, "id: 3\n") || strings.Count(later, "\nevent: ") != n-2 {
		t.Errorf("SSE after Last-Event-ID 2:\n%s", later)
	}
	_, types := get("/api/runs/"+id+"/events?types=run_done", map[string]string{"Authorization": auth})
	if strings.Count(types, "\n") != 1 || !strings.Contains(types, `"type":"run_done"`) {
		t.Errorf("events?types=run_done:\n%s", types)
	}
}

// A socket other users could open is refused by every client, and a state dir others can
// write is refused by the daemon.
func TestDaemonSocketPermissions(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t)
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main() report(1) end`})
	info := dt.start()
	if err := os.Chmod(info.Socket, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"daemon", "status"}, {"run", "-w", "wf.lua"}, {"daemon", "stop"}} {
		if _, errOut, code := dt.luft(args...); code != 1 || !strings.Contains(errOut, "refused: mode 0666 lets other users connect") {
			t.Errorf("%s with a 0666 socket: exit %d\n%s", strings.Join(args, " "), code, errOut)
		}
	}
	if err := os.Chmod(info.Socket, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := dt.luft("daemon", "stop"); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, errOut)
	}
	if err := os.Chmod(dt.state, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := dt.luft("daemon", "start", "--foreground"); code != 1 || !strings.Contains(errOut, "is writable by other users (mode 0777)") {
		t.Errorf("start in a 0777 state dir: exit %d\n%s", code, errOut)
	}
}

// storeView opens the state dir the daemon writes, read side.
func storeView(t *testing.T, dir string) *storage.SQLite {
	t.Helper()
	st, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return st
}

// completedCalls counts the agent calls the journal of the runs holds as completed.
func completedCalls(t *testing.T, st storage.Store, ids []string) (int, map[string]map[string]bool) {
	t.Helper()
	n, keys := 0, map[string]map[string]bool{}
	for _, id := range ids {
		keys[id] = map[string]bool{}
		entries, err := st.Journal(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Kind == "agent" && e.Status == storage.EntryCompleted {
				n++
				keys[id][e.CallKey] = true
			}
		}
	}
	return n, keys
}

// waitFor polls cond until it holds or the deadline passes; the condition is a real state
// change in the store, the poll interval only how soon it is seen.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", within, what)
		}
		<-tick.C
	}
}

// A SIGKILLed daemon, started again, resumes its runs; they complete with no finished
// call run again. The kill moments are drawn from a seeded generator
// (LUFT_DAEMON_KILL_SEED replays them; LUFT_DAEMON_KILL_POINTS sets how many, default 20).
func TestDaemonKillResume(t *testing.T) {
	t.Parallel()
	points := 20
	if testing.Short() {
		points = 5
	}
	if s := os.Getenv("LUFT_DAEMON_KILL_POINTS"); s != "" {
		points, _ = strconv.Atoi(s)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("LUFT_DAEMON_KILL_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d (LUFT_DAEMON_KILL_SEED replays it), %d kill points", seed, points)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=40")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main()
  local got = parallel({1, 2, 3, 4, 5, 6}, function(i) return agent{prompt = "fan " .. i}.text ~= "" end)
  local n = 0
  for i = 1, 6 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({fan = #got, steps = n})
end`})
	const callsPerRun = 12
	st := storeView(t, dt.state)
	defer st.Close()
	var ids []string
	type kill struct {
		seq       map[string]int64           // last stored event seq of each run at the kill
		completed map[string]map[string]bool // calls completed at the kill, by run
	}
	var kills []kill
	info := dt.start()
	for len(kills) < points {
		done, _ := completedCalls(t, st, ids)
		if done == len(ids)*callsPerRun {
			// Every run has finished its calls: start two more to kill.
			for range 2 {
				id, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
				if code != 0 {
					t.Fatalf("run --detach: exit %d\n%s", code, errOut)
				}
				ids = append(ids, strings.TrimSpace(id))
			}
		}
		target := done + 1 + rng.IntN(3)
		waitFor(t, 60*time.Second, fmt.Sprintf("%d completed calls", target), func() bool {
			n, _ := completedCalls(t, st, ids)
			return n >= min(target, len(ids)*callsPerRun)
		})
		dt.kill(info.PID)
		k := kill{seq: map[string]int64{}}
		_, k.completed = completedCalls(t, st, ids)
		for _, id := range ids {
			evs, err := st.EventsOfType(context.Background(), id, 0, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) > 0 {
				k.seq[id] = evs[len(evs)-1].Seq
			}
		}
		kills = append(kills, k)
		info = dt.start() // resumes the runs the killed daemon left running
	}
	for _, id := range ids {
		out, errOut, code := dt.luft("attach", id, "--no-tui")
		if code != 0 || !strings.Contains(out, `"fan": 6`) || !strings.Contains(out, `"steps": 6`) {
			t.Errorf("run %s after %d kills: exit %d\n%s%s", id, len(kills), code, out, errOut)
		}
	}
	redone, live := 0, 0
	for _, id := range ids {
		evs, err := st.EventsOfType(context.Background(), id, 0, 0, []string{event.AgentStarted})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			live++
			key, _ := ev.Data["call_key"].(string)
			for i, k := range kills {
				if k.completed[id][key] && ev.Seq > k.seq[id] {
					redone++
					t.Errorf("run %s: call %s was completed at kill %d but started again (seq %d)", id, key, i+1, ev.Seq)
				}
			}
		}
	}
	t.Logf("%d kills over %d runs; %d live agent starts for %d calls; %d finished calls redone", len(kills), len(ids), live, len(ids)*callsPerRun, redone)
}

// Two runs on one rate-limited key: as two luft processes each scheduler knows only its
// own turns, and together they overrun the key (the engine answers 429); through the
// daemon both share one scheduler and the engine never refuses a request.
// Not parallel: the runs are real processes on the wall clock against a tight key, and
// the package's other tests starve them of CPU (a reading that lands late is stale).
func TestDaemonSharedRateLimit(t *testing.T) {
	wf := `function main()
  local items = {}
  for i = 1, 16 do items[i] = i end
  local got = parallel(items, function(i) return agent{prompt = "item " .. i}.ok end)
  report(#got)
end`
	count429 := func(engine *testkit.Engine) (n, total int) {
		for _, r := range engine.Log() {
			total++
			if r.Status == http.StatusTooManyRequests {
				n++
			}
		}
		return n, total
	}
	both := func(dt *daemonTest) {
		errs := make(chan string, 2)
		for range 2 {
			go func() {
				cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "run", "-q", "-w", "wf.lua")
				cmd.Dir, cmd.Env = dt.dir, testEnv(nil, dt.env...)
				out, err := cmd.CombinedOutput()
				if err != nil || strings.TrimSpace(string(out)) != "16" {
					errs <- fmt.Sprintf("run: %v\n%s", err, out)
					return
				}
				errs <- ""
			}()
		}
		for range 2 {
			if e := <-errs; e != "" {
				t.Error(e)
			}
		}
	}
	setup := func(gate bool) (*daemonTest, *testkit.Engine) {
		engine := testkit.NewEngine(testkit.Config{Slots: 16, DefaultMaxTokens: 4, DecodePerToken: 50 * time.Millisecond,
			Limits: testkit.Limits{TPM: 120, Period: 2 * time.Second}})
		inner := testkit.NewServer(engine).Handler()
		// Two processes: the first request waits for the second, so both runs' first
		// turns are in flight before either learns the key's budget, as when two runs
		// start together. (Through the daemon the one scheduler sends a single first
		// turn and holds the rest until it answers: there is no second one to wait for.)
		var arrived atomic.Int32
		both := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if gate && r.URL.Path == "/v1/chat/completions" {
				switch arrived.Add(1) {
				case 1:
					select {
					case <-both:
					case <-time.After(10 * time.Second):
					}
				case 2:
					close(both)
				}
			}
			inner.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		dt := newDaemonTest(t, "OPENAI_API_KEY=k")
		writeFiles(t, dt.dir, map[string]string{"luft.toml": localBackend(srv.URL+"/v1", "m", ""), "wf.lua": wf})
		return dt, engine
	}
	dt, separate := setup(true)
	both(dt)
	sepN, sepTotal := count429(separate)
	dt, shared := setup(false)
	dt.start()
	both(dt)
	shN, shTotal := count429(shared)
	t.Logf("two processes: %d × 429 in %d requests; through the daemon: %d × 429 in %d requests", sepN, sepTotal, shN, shTotal)
	if sepN == 0 {
		t.Errorf("two separate processes met no 429: the test's load does not overrun the key")
	}
	// On a quiet machine the daemon meets none. Its pacing runs on the wall clock against an
	// engine on the wall clock, so on a loaded one a late response can let one turn through
	// early; the scheduler's own tests check its pacing exactly on a virtual clock. What this
	// test shows is that the runs share one budget: far fewer 429s than two processes meet.
	if shN*5 > sepN {
		t.Errorf("through the daemon the engine answered %d × 429, two processes %d: want at most a fifth as many", shN, sepN)
	}
	out, _, _ := dt.luft("daemon", "status", "--json")
	var st daemon.StatusJSON
	if json.Unmarshal([]byte(out), &st) != nil || st.RunsHosted != 2 {
		t.Errorf("the daemon did not host both runs:\n%s", out)
	}
}

// SIGTERM (luft daemon stop) suspends a hosted run after the grace period; the next start
// resumes it and it completes without redoing a finished call. A suspended run with a
// resume time is woken then, not before.
func TestDaemonStopSuspendsAndWakes(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=100")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main()
  local n = 0
  for i = 1, 8 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({steps = n})
end`})
	st := storeView(t, dt.state)
	defer st.Close()
	dt.start("--grace", "1ms")
	id, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("run --detach: exit %d\n%s", code, errOut)
	}
	waitFor(t, 30*time.Second, "two completed calls", func() bool {
		n, _ := completedCalls(t, st, []string{id})
		return n >= 2
	})
	if _, errOut, code := dt.luft("daemon", "stop"); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, errOut)
	}
	row, err := st.GetRun(context.Background(), id)
	if err != nil || row.Status != storage.StatusSuspended || !strings.Contains(row.Error, "its host shut down") {
		t.Fatalf("after stop the run is %q (%q), want suspended: %v", row.Status, row.Error, err)
	}
	_, before := completedCalls(t, st, []string{id})
	evs, _ := st.EventsOfType(context.Background(), id, 0, 0, nil)
	stopSeq := evs[len(evs)-1].Seq
	// Its resume time moves a little into the future: the daemon must wait for it.
	wakeAt := time.Now().Add(1500 * time.Millisecond)
	if err := st.UpdateRun(context.Background(), id, storage.RunUpdate{ResumeAfter: &wakeAt}); err != nil {
		t.Fatal(err)
	}
	info := dt.start("--grace", "1ms")
	// A status read before the resume time must show it suspended (on a busy machine the
	// read may come later; attempt 2's start time below is checked either way).
	if out, _, _ := dt.luft("status", id, "--json"); time.Now().Before(wakeAt) && !strings.Contains(out, `"status": "suspended"`) {
		t.Errorf("the run was resumed before its resume time:\n%s", out)
	}
	waitFor(t, 60*time.Second, "the run to complete", func() bool {
		r, err := st.GetRun(context.Background(), id)
		return err == nil && r.Status == storage.StatusCompleted
	})
	starts, _ := st.EventsOfType(context.Background(), id, 0, 0, []string{event.RunStarted, event.AgentStarted})
	for _, ev := range starts {
		if ev.Type == event.RunStarted && runtime.AttemptOf(ev) == 2 && ev.TS.Before(wakeAt) {
			t.Errorf("attempt 2 started at %s, before the resume time %s", ev.TS, wakeAt)
		}
		key, _ := ev.Data["call_key"].(string)
		if ev.Type == event.AgentStarted && ev.Seq > stopSeq && before[id][key] {
			t.Errorf("call %s completed before the stop ran again (seq %d)", key, ev.Seq)
		}
	}
	out, _, code := dt.luft("attach", id, "--no-tui")
	if code != 0 || !strings.Contains(out, `"steps": 8`) {
		t.Errorf("attach the woken run: exit %d\n%s", code, out)
	}
	// Woken once, by its timer: the claim loop leaves alone a run this daemon wakes itself.
	if b, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile)); strings.Count(string(b), "run "+id+": resumed") != 1 ||
		strings.Contains(string(b), "run "+id+": not resumed") {
		t.Errorf("the run was not resumed exactly once:\n%s", b)
	}
	// SIGTERM does what stop does.
	id2, _, _ := dt.luft("run", "--detach", "-w", "wf.lua")
	id2 = strings.TrimSpace(id2)
	waitFor(t, 30*time.Second, "a completed call", func() bool {
		n, _ := completedCalls(t, st, []string{id2})
		return n >= 1
	})
	if err := syscall.Kill(info.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := daemon.WaitGone(ctx, dt.state); err != nil {
		t.Fatalf("daemon still up after SIGTERM: %v", err)
	}
	if r, err := st.GetRun(context.Background(), id2); err != nil || r.Status != storage.StatusSuspended {
		t.Errorf("after SIGTERM the run is %q (%v), want suspended", r.Status, err)
	}
}

// luft daemon stop --grace gives the hosted runs that grace, not the one the daemon was
// started with: a run busy in a long call is suspended after 1s although the daemon's
// own grace is 10 minutes. A negative grace is a usage error.
func TestDaemonStopGrace(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=600000")
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main() agent{prompt = "long"} end`})
	st := storeView(t, dt.state)
	defer st.Close()
	dt.start("--grace", "10m")
	id, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
	id = strings.TrimSpace(id)
	if code != 0 {
		t.Fatalf("run --detach: exit %d\n%s", code, errOut)
	}
	waitFor(t, 30*time.Second, "the call to start", func() bool {
		evs, _ := st.EventsOfType(context.Background(), id, 0, 0, []string{event.AgentStarted})
		return len(evs) > 0
	})
	if _, errOut, code := dt.luft("daemon", "stop", "--grace", "-1s"); code != 2 || !strings.Contains(errOut, "invalid --grace -1s") {
		t.Errorf("stop --grace -1s: exit %d\n%s", code, errOut)
	}
	for _, g := range []string{"0s", "-1s"} {
		if _, errOut, code := dt.luft("daemon", "start", "--foreground", "--grace", g); code != 2 || !strings.Contains(errOut, "invalid --grace "+g+": give a positive duration") {
			t.Errorf("start --grace %s: exit %d\n%s", g, code, errOut)
		}
	}
	if out, errOut, code := dt.luft("daemon", "stop", "--grace", "1s"); code != 0 || !strings.Contains(out, "luft daemon stopped") {
		t.Fatalf("stop --grace 1s: exit %d\n%s%s", code, out, errOut)
	}
	log, _ := os.ReadFile(filepath.Join(dt.state, daemon.LogFile))
	if !strings.Contains(string(log), "asked to shut down (grace 1s)") || !strings.Contains(string(log), "runs hosted; grace 1s") {
		t.Errorf("the daemon's log does not say grace 1s:\n%s", log)
	}
	row, err := st.GetRun(context.Background(), id)
	if err != nil || row.Status != storage.StatusSuspended {
		t.Errorf("after stop the run is %q (%v), want suspended", row.Status, err)
	}
}

// A resume hosted by the daemon accepts start flags repeated with the run's own value
// and refuses a different one, as a resume in the calling process does.
func TestDaemonResumeRepeatedFlags(t *testing.T) {
	t.Parallel()
	dt := newDaemonTest(t)
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main()
  local r = agent{prompt = "x"}
  if not r.ok then error("the call failed") end
  report(r.text)
end`})
	_, errOut, code := luftIn(t, dt.dir, []string{"LUFT_DAEMON=off", "LUFT_MOCK_FAIL=error"},
		"--state-dir", dt.state, "run", "-w", "wf.lua", "-b", "mock", "--timeout", "1m")
	if code != 1 {
		t.Fatalf("the failing run: exit %d\n%s", code, errOut)
	}
	st := storeView(t, dt.state)
	defer st.Close()
	runs, err := st.ListRuns(context.Background(), storage.ListOptions{})
	if err != nil || len(runs) != 1 {
		t.Fatalf("runs: %v %v", runs, err)
	}
	id := runs[0].ID
	info := dt.start()
	if _, errOut, code := dt.luft("run", "--resume", id, "-b", "acp:codex"); code != 2 ||
		!strings.Contains(errOut, "--backend acp:codex differs from the run's mock") {
		t.Errorf("resume with another backend: exit %d\n%s", code, errOut)
	}
	if _, errOut, code := dt.luft("run", "--resume", id, "--timeout", "2m"); code != 2 ||
		!strings.Contains(errOut, "--timeout 2m0s differs from the run's 1m0s") {
		t.Errorf("resume with another timeout: exit %d\n%s", code, errOut)
	}
	// --detach: what is checked is the daemon's answer, not the view that attaches.
	out, errOut, code := dt.luft("run", "--resume", id, "-b", "mock", "--timeout", "60s", "--detach")
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("resume with the same flags: exit %d\n%s%s", code, out, errOut)
	}
	waitFor(t, 30*time.Second, "the resumed run to complete", func() bool {
		r, err := st.GetRun(context.Background(), id)
		return err == nil && r.Status == storage.StatusCompleted
	})
	evs, _ := st.EventsOfType(context.Background(), id, 0, 0, []string{event.RunStarted})
	if len(evs) != 2 || runtime.AttemptOf(evs[1]) != 2 {
		t.Fatalf("run_started events: %v", evs)
	}
	if row, _ := st.GetRun(context.Background(), id); row.PID != info.PID {
		t.Errorf("the resume ran in pid %d, not in the daemon (%d)", row.PID, info.PID)
	}
}
