package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/storage"
)

// stepsScript calls agents one after another, so its events come in one order on every
// run: a run killed during its second call resumes with the first replayed.
const stepsScript = `
function main()
  phase("draft", 3)
  log("three calls, one after another")
  local outs = {}
  for i = 1, 3 do
    outs[i] = agent{ name = "step " .. i, prompt = "step " .. i }.output
  end
  phase("merge")
  local m = agent{ name = "merge", prompt = table.concat(outs, " | ") }
  report({ markdown = "# Steps\n\n" .. m.output })
end
`

// session is the answers of luft's commands in one place: the same commands on SQLite
// and on PostgreSQL must give the same answers, once run ids, times and durations are
// taken out.
type session struct {
	t    *testing.T
	bin  string
	dir  string
	env  []string
	name string
}

func newSession(t *testing.T, name string, env ...string) *session {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "steps.lua"), []byte(stepsScript), 0o644); err != nil {
		t.Fatal(err)
	}
	return &session{t: t, bin: luftBinary(t), dir: dir, name: name,
		env: append([]string{"LUFT_HOME=" + filepath.Join(dir, "state")}, env...)}
}

// luft runs one command to its end and returns its stdout and stderr, with the exit code.
func (s *session) luft(env []string, args ...string) string {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	cmd.Env = testEnv(nil, append(s.env, env...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("%s: luft %s: %v", s.name, strings.Join(args, " "), err)
	}
	return fmt.Sprintf("$ luft %s\n%s[exit %d]\n", strings.Join(args, " "), out, code)
}

// lastRun is the id of the newest run, from luft list --json.
func (s *session) lastRun() string {
	s.t.Helper()
	cmd := exec.Command(s.bin, "list", "--json")
	cmd.Dir = s.dir
	cmd.Env = testEnv(nil, s.env...)
	out, err := cmd.Output()
	if err != nil {
		s.t.Fatalf("%s: luft list --json: %v", s.name, err)
	}
	var runs []struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(out, &runs); err != nil || len(runs) == 0 {
		s.t.Fatalf("%s: luft list --json: %v\n%s", s.name, err, out)
	}
	return runs[0].RunID
}

var (
	reRFC3339  = regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?`)
	reClock    = regexp.MustCompile(`\b\d\d:\d\d:\d\d(\.\d+)?\b`)
	reDuration = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|ms|s|m)\b`)
	reSpaces   = regexp.MustCompile(` {2,}`)
	rePID      = regexp.MustCompile(`"pid": \d+`)
	reNode     = regexp.MustCompile(`"node": "[^"]*"`) // each session's state dir is its own node
	// On PostgreSQL a CLI run is its node's under a lease (on SQLite its process's): its
	// JSON has lease_until, and luft list the NODE column that leased runs bring.
	reLease   = regexp.MustCompile(`(?m)^ *"lease_until": "TIME",\n`)
	reCLINode = regexp.MustCompile(`(?m)^(RUN\d+ \S+ TIME \d+ \d+) \S+\.cli `)
)

// normal takes out what differs between any two sessions: the run ids, the work dir,
// times, durations and the column widths they set.
func (s *session) normal(text string, ids ...string) string {
	for i, id := range ids {
		text = strings.ReplaceAll(text, id, fmt.Sprintf("RUN%d", i+1))
		text = strings.ReplaceAll(text, id[:23]+"…", fmt.Sprintf("RUN%d…", i+1))
	}
	text = strings.ReplaceAll(text, s.dir, "$WORK")
	text = reRFC3339.ReplaceAllString(text, "TIME")
	text = reClock.ReplaceAllString(text, "CLOCK")
	// A call quicker than the display's unit shows no duration at all.
	text = reDuration.ReplaceAllString(text, "")
	text = strings.ReplaceAll(text, " ·  ·", " ·")
	text = rePID.ReplaceAllString(text, `"pid": PID`)
	text = reNode.ReplaceAllString(text, `"node": "NODE"`)
	text = reLease.ReplaceAllString(text, "")
	text = reSpaces.ReplaceAllString(text, " ")
	text = strings.ReplaceAll(text, "RUN STATUS STARTED AGENTS TOKENS NODE WORKFLOW", "RUN STATUS STARTED AGENTS TOKENS WORKFLOW")
	return reCLINode.ReplaceAllString(text, "$1 ")
}

// transcript runs a workflow, looks at it with list, status and logs, then runs it again,
// kills that run with SIGKILL during its second agent call, looks at it, resumes it and
// looks again. It returns what the commands printed.
func (s *session) transcript() string {
	s.t.Helper()
	var b strings.Builder
	b.WriteString(s.luft(nil, "run", "-w", "steps.lua"))
	first := s.lastRun()
	for _, args := range [][]string{{"list"}, {"status", first}, {"status", "--json", first[:8]}, {"logs", first}} {
		b.WriteString(s.luft(nil, args...))
	}

	// Each call takes a second, so the kill once the second call's start is printed (and
	// so stored) lands while that call is in flight.
	p := startLuftIn(s.t, s.dir, append(s.env, "LUFT_MOCK_LATENCY_MS=1000"), "run", "--json", "-w", "steps.lua")
	p.waitStdout(`"name":"step 2"`)
	p.signal(os.Kill)
	<-p.done
	second := s.lastRun()
	for _, args := range [][]string{{"list"}, {"status", second}} {
		b.WriteString(s.luft(nil, args...))
	}
	b.WriteString(s.luft(nil, "run", "--resume", second))
	for _, args := range [][]string{{"list"}, {"status", second}, {"logs", second}} {
		b.WriteString(s.luft(nil, args...))
	}
	return s.normal(b.String(), first, second)
}

// TestPostgresAnswersAsSQLite runs one session of commands through the real binary on
// SQLite and on PostgreSQL (LUFT_STORAGE_URL, a database of its own) and compares what they
// print: a run on the mock, list, status, status --json, logs, and a run killed with SIGKILL
// and resumed (--resume) with its finished call replayed. On PostgreSQL nothing but the
// runs/ folder is written to the state dir.
func TestPostgresAnswersAsSQLite(t *testing.T) {
	url := pgtest.URL(t)
	t.Parallel()
	lite := newSession(t, "sqlite")
	pg := newSession(t, "postgres", storageEnv+"="+url)
	want, got := lite.transcript(), pg.transcript()
	if got != want {
		t.Fatalf("PostgreSQL answers differ from SQLite's:\n%s", lineDiff(want, got))
	}
	for _, must := range []string{"[exit 0]", "1 cached", "RUN2"} {
		if !strings.Contains(got, must) {
			t.Errorf("the transcript has no %q:\n%s", must, got)
		}
	}
	if _, err := os.Stat(filepath.Join(pg.dir, "state", "luft.db")); !os.IsNotExist(err) {
		t.Errorf("a luft.db was made in the state dir on PostgreSQL (%v)", err)
	}
	t.Logf("transcript:\n%s", got)
}

// lineDiff shows the first lines where SQLite's and PostgreSQL's texts differ, with both.
func lineDiff(want, got string) string { return labelledDiff("sqlite", "postgres", want, got) }

// labelledDiff shows the first lines where two texts, from a and from b, differ, with both.
func labelledDiff(la, lb, want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wa, gb string
		if i < len(w) {
			wa = w[i]
		}
		if i < len(g) {
			gb = g[i]
		}
		if wa != gb {
			return fmt.Sprintf("line %d:\n  %s: %q\n  %s: %q\n--- %s:\n%s\n--- %s:\n%s", i+1, la, wa, lb, gb, la, want, lb, got)
		}
	}
	return ""
}

// The daemon on PostgreSQL: it hosts detached and attached runs whose rows live in the
// database, so luft list and status on another state dir (another machine) with the same
// LUFT_STORAGE_URL see them, and the daemon's state dir keeps only its own files.
func TestDaemonOnPostgres(t *testing.T) {
	url := pgtest.URL(t)
	t.Parallel()
	dt := newDaemonTest(t, "LUFT_MOCK_LATENCY_MS=20", storageEnv+"="+url)
	writeFiles(t, dt.dir, map[string]string{"wf.lua": `function main()
  local n = 0
  for i = 1, 4 do if agent{prompt = "step " .. i}.ok then n = n + 1 end end
  report({steps = n})
end`})
	info := dt.start()
	id, errOut, code := dt.luft("run", "--detach", "-w", "wf.lua")
	id = strings.TrimSpace(id)
	if code != 0 || len(id) != 36 {
		t.Fatalf("run --detach: exit %d, stdout %q\n%s", code, id, errOut)
	}
	out, errOut, code := dt.luft("attach", id, "--no-tui")
	if code != 0 || !strings.Contains(out, `"steps": 4`) || !strings.Contains(errOut, "completed") {
		t.Errorf("attach: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = dt.luft("run", "--no-tui", "-w", "wf.lua")
	if code != 0 || !strings.Contains(out, `"steps": 4`) {
		t.Errorf("run through the daemon: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = dt.luft("daemon", "status")
	if !strings.Contains(out, fmt.Sprintf("pid        %d", info.PID)) || !strings.Contains(out, "runs       2 hosted, 0 running") {
		t.Errorf("daemon status:\n%s", out)
	}

	// Another state dir on the same database sees both runs, as the daemon hosted them.
	other := filepath.Join(dt.dir, "other")
	out, errOut, code = luftIn(t, dt.dir, dt.env, "--state-dir", other, "list")
	if code != 0 || strings.Count(out, "completed") != 2 || !strings.Contains(out, id) {
		t.Errorf("list from another state dir: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = luftIn(t, dt.dir, dt.env, "--state-dir", other, "status", id, "--json")
	if !strings.Contains(out, `"status": "completed"`) || !strings.Contains(out, fmt.Sprintf(`"pid": %d`, info.PID)) {
		t.Errorf("status from another state dir:\n%s", out)
	}
	for _, dir := range []string{dt.state, other} {
		if _, err := os.Stat(filepath.Join(dir, storage.DBFile)); !os.IsNotExist(err) {
			t.Errorf("%s has a %s on PostgreSQL (%v)", dir, storage.DBFile, err)
		}
	}
}

// sqliteOnlyScripts use several state dirs in one script as separate stores (with a
// storage URL they share the database), or expect the message for a state dir that holds
// no luft.db.
var sqliteOnlyScripts = []string{"compat-cli.txtar", "inspect.txtar", "resume.txtar"}

// TestScriptsOnPostgres runs the CLI's scripts (testdata/script, but sqliteOnlyScripts)
// with LUFT_STORAGE_URL set to a database of each script's own: the commands answer on
// PostgreSQL as the scripts expect on SQLite.
func TestScriptsOnPostgres(t *testing.T) {
	if ok, msg := pgtest.Available(); !ok {
		t.Skip(msg)
	}
	p := scriptParams(t)
	all, err := filepath.Glob(filepath.Join(p.Dir, "*.txtar"))
	if err != nil || len(all) == 0 {
		t.Fatalf("no scripts in %s (%v)", p.Dir, err)
	}
	for _, f := range all {
		if !slices.Contains(sqliteOnlyScripts, filepath.Base(f)) {
			p.Files = append(p.Files, f)
		}
	}
	p.Dir = ""
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		u, drop, err := pgtest.Create()
		if err != nil {
			return err
		}
		env.Defer(func() {
			if err := drop(); err != nil {
				env.T().Fatal(err)
			}
		})
		env.Setenv(storageEnv, u)
		return nil
	}
	testscript.Run(t, p)
}
