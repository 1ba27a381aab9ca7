package main

import (
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/internal/testkit"
)

// budgetWorkflow calls 16 agents at once: together the two runs of TestTwoDaemonsOnOneKey
// need several times what the key refills in a second.
const budgetWorkflow = `function main()
  local items = {}
  for i = 1, 16 do items[i] = i end
  local got = parallel(items, function(i) return agent{prompt = "item " .. i}.ok end)
  report(#got)
end`

// budgetEngine is the fake engine of one API key with a tight token budget (120 tokens
// per 2 s) answering 429 when it is empty, behind a gate that holds the first request
// until a second one comes (at most 3 s): two nodes that each believe they have the whole
// budget both send their first turns before either has a reading, as when two runs
// start together, while a node that waits for the other's scout sends nothing until the
// scout's answer.
func budgetEngine(t *testing.T) (*testkit.Engine, string) {
	engine := testkit.NewEngine(testkit.Config{Slots: 32, DefaultMaxTokens: 4, DecodePerToken: 50 * time.Millisecond,
		Limits: testkit.Limits{TPM: 120, Period: 2 * time.Second}})
	inner := testkit.NewServer(engine).Handler()
	var arrived atomic.Int32
	second := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			switch arrived.Add(1) {
			case 1:
				select {
				case <-second:
				case <-time.After(3 * time.Second):
				}
			case 2:
				close(second)
			}
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return engine, srv.URL + "/v1"
}

// rejected counts the engine's 429s and requests, from its log.
func rejected(engine *testkit.Engine) (n, total int) {
	for _, r := range engine.Log() {
		total++
		if r.Status == http.StatusTooManyRequests {
			n++
		}
	}
	return n, total
}

// twoDaemonsOnOneKey starts two daemons, each on its own state dir with env, on one key
// of a fresh budgetEngine, runs budgetWorkflow on both at once and returns the engine.
func twoDaemonsOnOneKey(t *testing.T, env ...string) *testkit.Engine {
	engine, url := budgetEngine(t)
	var nodes []*daemonTest
	for range 2 {
		dt := newDaemonTest(t, append([]string{"OPENAI_API_KEY=k"}, env...)...)
		writeFiles(t, dt.dir, map[string]string{"luft.toml": localBackend(url, "m", ""), "wf.lua": budgetWorkflow})
		dt.start()
		nodes = append(nodes, dt)
	}
	var wg sync.WaitGroup
	for _, dt := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(luftBinary(t), "--state-dir", dt.state, "run", "-q", "-w", "wf.lua")
			cmd.Dir, cmd.Env = dt.dir, testEnv(nil, dt.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != "16" {
				t.Errorf("run on the daemon of %s: %v\n%s", dt.state, err, out)
			}
		}()
	}
	wg.Wait()
	return engine
}

// Two daemons, each on its own SQLite state dir, each believe they have the key's whole
// budget and together overrun it (the engine answers 429); two daemons on one PostgreSQL
// share one budget (one scouts the unknown limit, both take chunks of the shared level)
// and the engine refuses none of their requests.
// Not parallel: real processes on the wall clock against a tight key.
func TestTwoDaemonsOnOneKey(t *testing.T) {
	url := pgtest.URL(t)
	sqlite := twoDaemonsOnOneKey(t)
	sqN, sqTotal := rejected(sqlite)
	pg := twoDaemonsOnOneKey(t, "LUFT_STORAGE_URL="+url)
	pgN, pgTotal := rejected(pg)
	t.Logf("two daemons on SQLite: %d × 429 in %d requests; two daemons on one PostgreSQL: %d × 429 in %d requests",
		sqN, sqTotal, pgN, pgTotal)
	if sqN == 0 {
		t.Errorf("two daemons on their own SQLite met no 429: the workload does not overrun the key")
	}
	if pgN != 0 {
		t.Errorf("two daemons on one PostgreSQL met %d × 429, want none", pgN)
	}
	if pgTotal < 32 {
		t.Errorf("the PostgreSQL pair sent %d requests, want at least the 32 turns", pgTotal)
	}
}
