package luft_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/luft-run/luft"
	"github.com/luft-run/luft/config"
	"github.com/luft-run/luft/internal/testkit"
)

// noteModel is an OpenAI-compatible model on loopback that, asked to "keep a note",
// calls write_file once and then answers "noted"; and a luft.toml whose backend "local"
// it is, with the file tools confined to ws.
func noteModel(ws string) (cfg *config.Config, stop func()) {
	srv := httptest.NewServer(testkit.NewServer(testkit.NewEngine(testkit.Config{ToolRules: []testkit.ToolRule{{
		Match: "keep a note",
		Calls: []testkit.ScriptedCall{{Name: "write_file", Arguments: `{"path":"note.txt","content":"hello"}`}},
		Reply: "noted",
	}}})).Handler())
	c, err := config.Parse("luft.toml", fmt.Appendf(nil, `default_backend = "local"
[backends.local]
type = "openai"
base_url = %q
model = "fake-1"
[tools]
workspace = %q
`, srv.URL+"/v1", ws))
	if err != nil {
		panic(err)
	}
	return &c, srv.Close
}

const noteScript = `function main()
  local r = agent{prompt = "keep a note", tools = {"write_file"}}
  report(r.text)
end`

// Answer a destructive tool call from Go. write_file is destructive, so under the default
// [tools] approval = "ask" the agent's write waits for a yes: Options.Approve is asked,
// and its answer decides. (The model here is a scripted one on loopback that asks for
// write_file once.)
func ExampleApproveFunc() {
	dir, ws := stateDir(), stateDir()
	defer os.RemoveAll(dir)
	defer os.RemoveAll(ws)
	cfg, stop := noteModel(ws)
	defer stop()

	eng, err := luft.New(luft.Options{StateDir: dir, Config: cfg,
		Getenv: func(string) string { return "" },
		Approve: func(ctx context.Context, a luft.Approval) (bool, error) {
			fmt.Println("asked:", a.Tool, a.Arguments)
			return true, nil
		}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	res, err := eng.Run(context.Background(), luft.Script{Source: noteScript})
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	note, _ := os.ReadFile(filepath.Join(ws, "note.txt"))
	fmt.Println(res.Status, res.Report)
	fmt.Println("note.txt:", string(note))
	// Output:
	// asked: write_file {"path":"note.txt","content":"hello"}
	// completed noted
	// note.txt: hello
}

// With Options.Approvals the run parks a destructive call until Engine.Approve answers:
// here the program sees the approval_requested event, reads the pending call from
// Status, and declines it; the agent is told the user declined and goes on.
func ExampleEngine_Approve() {
	dir, ws := stateDir(), stateDir()
	defer os.RemoveAll(dir)
	defer os.RemoveAll(ws)
	cfg, stop := noteModel(ws)
	defer stop()

	eng, err := luft.New(luft.Options{StateDir: dir, Config: cfg, Getenv: func(string) string { return "" }, Approvals: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	ctx := context.Background()
	run, err := eng.Start(ctx, luft.Script{Source: noteScript})
	if err != nil {
		fmt.Println(err)
		return
	}
	for ev := range run.Events() {
		switch ev.Type {
		case luft.EventApprovalRequested:
			info, _ := eng.Status(ctx, run.ID())
			fmt.Println(info.Status, info.PendingApprovals[0].Tool)
			a, err := eng.Approve(ctx, run.ID(), ev.Field("approval_id"), false)
			fmt.Println(a.Status, err)
		case luft.EventApprovalDecided:
			fmt.Println("decided: allow =", ev.Data["allow"])
		}
	}
	res, _ := run.Wait()
	_, statErr := os.Stat(filepath.Join(ws, "note.txt"))
	fmt.Println(res.Status, res.Report, "- note.txt written:", statErr == nil)
	// Output:
	// awaiting_approval write_file
	// declined <nil>
	// decided: allow = false
	// completed noted - note.txt written: false
}
