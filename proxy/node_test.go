package proxy

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// TestOpenAINodeClientOwnLoop runs an own-loop agent written with the official openai npm
// client (internal/testkit/node) through the proxy: two tools, five turns, streamed and
// not. While it runs, another caller's batch flood fills the lane's one slot; the
// engine's log shows every turn of the agent, each going ahead of the flood still queued.
func TestOpenAINodeClientOwnLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("needs node and internal/testkit/node/node_modules")
	}
	node := testkit.Node(t)
	testkit.NodeFile(t, "openai/package.json")
	nodeDir := testkit.NodeDir()
	for _, mode := range []string{"plain", "stream"} {
		t.Run(mode, func(t *testing.T) {
			e := testkit.NewEngine(testkit.Config{Models: []string{"m1"}, DecodePerToken: 3 * time.Millisecond,
				ToolRules: []testkit.ToolRule{{Match: "plan a trip", Rounds: 4, Calls: []testkit.ScriptedCall{
					{Name: "get_weather", Arguments: `{"city":"Oslo"}`}, {Name: "get_time", Arguments: `{"city":"Oslo"}`}}}}})
			srv := testkit.NewServer(e)
			base, err := srv.Start("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			q := &queueWatch{s: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 1}}, nil),
				queued: make(chan string, 256)}
			p, err := New(Options{Upstreams: []Upstream{{Name: "fake", BaseURL: base, Model: "m1"}}, Scheduler: q})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			front := httptest.NewServer(p)
			defer front.Close()

			const flood = 60
			var all []<-chan int
			for i := 0; i < flood; i++ {
				all = append(all, postAsync(front.URL, `{"model":"m1","messages":[{"role":"user","content":"batch job"}],"max_tokens":16}`,
					map[string]string{"x-luft-caller": "flood", "x-luft-class": "batch"}))
			}
			waitQueued(t, q, flood-1) // one runs, the rest wait in luft
			args := []string{"testdata/ownloop.mjs", front.URL + "/v1", mode}
			if mode == "plain" {
				args = append(args, "trip-1")
			}
			cmd := exec.Command(node, args...)
			cmd.Env = append(os.Environ(), "LUFT_NODE_DIR="+nodeDir)
			out, err := cmd.Output()
			if err != nil {
				var stderr string
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = string(ee.Stderr)
				}
				t.Fatalf("node agent: %v\n%s%s", err, out, stderr)
			}
			var res struct {
				Turns int
				Runs  []string
				Text  string
			}
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatalf("agent output: %s", out)
			}
			if res.Turns != 5 || res.Text == "" {
				t.Fatalf("agent took %d turns (want 5: four tool rounds, then an answer): %s", res.Turns, out)
			}
			for _, r := range res.Runs {
				if r == "" || r != res.Runs[0] {
					t.Fatalf("the agent's turns joined runs %v: one run expected", res.Runs)
				}
			}
			waitAll(t, all)
			var order []string
			agent := 0
			for _, r := range e.Log() {
				if r.Status != 200 {
					t.Fatalf("engine answered %d: %+v", r.Status, r)
				}
				if r.Caller == "agent" {
					agent++
					order = append(order, "A")
				} else {
					order = append(order, "f")
				}
			}
			if agent != 5 {
				t.Fatalf("the engine saw %d agent turns, want 5", agent)
			}
			// Each turn of the agent went to the engine a few flood turns after the previous
			// one (the flood turn running when it asked, and those that started while the
			// agent itself worked between turns), though dozens of flood turns were queued
			// before it each time: in arrival order it would wait for all of them.
			s := strings.Join(order, "")
			t.Logf("engine order (A agent, f flood): %s", s)
			first, last := strings.Index(s, "A"), strings.LastIndex(s, "A")
			for _, gap := range strings.Split(s[first+1:last], "A") {
				if len(gap) > 5 {
					t.Fatalf("engine order %s: %d flood turns between two agent turns", s, len(gap))
				}
			}
			if rest := len(s) - last - 1; rest < flood/3 {
				t.Fatalf("engine order %s: the agent finished only %d flood turns before the end", s, rest)
			}
		})
	}
}
