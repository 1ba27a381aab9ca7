package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// liveScript runs three quick agents, says so, then four that wait until cancelled.
const liveScript = `
function main()
  phase("work")
  for i = 1, 3 do agent{ name = "quick " .. i, prompt = "go " .. i } end
  log("quick ones done")
  parallel({1, 2, 3, 4}, function(i) return agent{ name = "slow " .. i, prompt = "wait " .. i } end)
end
`

const liveMock = `{"responses": {
  "quick": {"text": "done", "usage": {"input": 10, "output": 5}},
  "slow": {"text": "never", "delay_ms": 600000}
}}`

// luftOut runs a luft command to its end and returns its stdout.
func luftOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(luftBinary(t), args...)
	cmd.Env = testEnv(nil)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("luft %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

type countsJSON struct {
	ID     string `json:"run_id"`
	Status string `json:"status"`
	Agents struct {
		OK, Failed, Cached, Cancelled int
	} `json:"agents"`
	Tokens int `json:"tokens"`
}

// While a run goes on, luft status and luft list (other processes reading the state dir)
// show the calls finished so far and their tokens, not the zeros of a row written only at
// the end (issue 24, item 2). Once Ctrl-C stops it, the calls it cut off are counted as
// cancelled, not failed, in the summary and in status (item 6).
func TestLiveCountsAndCancelledCalls(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	for name, text := range map[string]string{"live.lua": liveScript, "live.json": liveMock} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := startLuft(t, nil, "--state-dir", state, "run", "-w", filepath.Join(dir, "live.lua"),
		"--mock-file", filepath.Join(dir, "live.json"))
	started := p.waitStderr(" started: ")
	runID := strings.Fields(strings.TrimPrefix(started, "luft: run "))[0]
	p.waitStderr("quick ones done")

	// The row is brought up to date as calls finish, a moment after them: look until it
	// is, with a deadline only as a safety net.
	var st countsJSON
	deadline := time.Now().Add(lineTimeout)
	for {
		st = countsJSON{}
		if err := json.Unmarshal([]byte(luftOut(t, "--state-dir", state, "status", "--json", runID)), &st); err != nil {
			t.Fatal(err)
		}
		if st.Agents.OK == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Status != "running" || st.Agents.OK != 3 || st.Agents.Failed != 0 || st.Tokens != 45 {
		t.Fatalf("luft status --json while the run goes on: %+v, want running with 3 ok and 45 tokens", st)
	}
	text := luftOut(t, "--state-dir", state, "status", runID)
	for _, want := range []string{"\nagents    3 ok, 0 failed, 0 cached\n", "\ntokens    30 in / 15 out\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("luft status while the run goes on lacks %q:\n%s", want, text)
		}
	}
	var list []countsJSON
	if err := json.Unmarshal([]byte(luftOut(t, "--state-dir", state, "list", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Agents.OK != 3 || list[0].Tokens != 45 {
		t.Errorf("luft list --json while the run goes on: %+v, want 3 ok and 45 tokens", list)
	}
	// RUN STATUS STARTED (date and time) AGENTS TOKENS WORKFLOW
	table := luftOut(t, "--state-dir", state, "list")
	if row := strings.Fields(strings.Split(table, "\n")[1]); len(row) < 6 || row[1] != "running" || row[4] != "3" || row[5] != "45" {
		t.Errorf("luft list while the run goes on does not count 3 agents and 45 tokens:\n%s", table)
	}

	p.signal(os.Interrupt)
	if code := p.exitCode(); code != exitResumable {
		t.Fatalf("exit code %d, want %d\nstderr:\n%s", code, exitResumable, p.err.text())
	}
	if stderr := p.err.text(); !strings.Contains(stderr, "agents    3 ok, 0 failed, 0 cached, 4 cancelled") {
		t.Errorf("the summary of the cancelled run does not count the cut-off calls as cancelled:\n%s", stderr)
	}
	st = countsJSON{}
	if err := json.Unmarshal([]byte(luftOut(t, "--state-dir", state, "status", "--json", runID)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Status != "cancelled" || st.Agents.OK != 3 || st.Agents.Failed != 0 || st.Agents.Cancelled != 4 {
		t.Errorf("luft status --json after the cancel: %+v, want cancelled with 3 ok, 0 failed, 4 cancelled", st)
	}
	if text := luftOut(t, "--state-dir", state, "status", runID); !strings.Contains(text, "\nagents    3 ok, 0 failed, 0 cached, 4 cancelled\n") {
		t.Errorf("luft status after the cancel does not count 4 cancelled:\n%s", text)
	}
	// The phase the cancel ended counts them the same way.
	var phases struct {
		Actual []struct{ OK, Failed, Cancelled int } `json:"actual"`
	}
	if err := json.Unmarshal([]byte(luftOut(t, "--state-dir", state, "phases", "--json", runID)), &phases); err != nil {
		t.Fatal(err)
	}
	if len(phases.Actual) != 1 || phases.Actual[0].OK != 3 || phases.Actual[0].Failed != 0 || phases.Actual[0].Cancelled != 4 {
		t.Errorf("luft phases --json after the cancel: %+v, want one phase with 3 ok, 0 failed, 4 cancelled", phases.Actual)
	}
	if text := luftOut(t, "--state-dir", state, "phases", runID); !strings.Contains(text, "CANCELLED") ||
		!strings.Contains(strings.Join(strings.Fields(text), " "), "1 work done 0 3 0 4") {
		t.Errorf("luft phases after the cancel does not show 4 cancelled:\n%s", text)
	}
}
