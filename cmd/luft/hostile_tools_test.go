package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/luft-run/luft/adapters/tools/sandbox"
	"github.com/luft-run/luft/internal/testkit"
)

// toolsHostile adds what the agents'-tools archives (tools-*.txtar) need: the fakeengine
// command, whose scripted tool calls play a hostile model, and the [landlock] condition,
// true where the kernel can confine commands.
func toolsHostile(p *testscript.Params) {
	p.Cmds["fakeengine"] = cmdFakeEngine
	prev := p.Condition
	p.Condition = func(cond string) (bool, error) {
		if cond == "landlock" {
			_, err := sandbox.Status()
			return err == nil, nil
		}
		if prev != nil {
			return prev(cond)
		}
		return false, fmt.Errorf("unknown condition %q", cond)
	}
}

// engines are the fake engines the running scripts started.
var engines sync.Map // *testscript.TestScript → *testkit.Engine

// cmdFakeEngine serves the test kit's fake OpenAI engine on loopback for the rest of the
// script, its tool calls scripted by RULES, and points OPENAI_BASE_URL at it; with -dump
// it writes every message the engine has received (the tool results luft sent the model
// among them) to FILE, one "role: content" a line.
//
//	fakeengine RULES.json
//	fakeengine -dump FILE
//
// RULES is a JSON array of {"match": "text in the prompt", "calls": [{"name": "tool",
// "arguments": {...}}], "rounds": n, "reply": "the final answer", "offered": true} (testkit.ToolRule;
// with "offered" the calls are made only when the request offers their tools).
func cmdFakeEngine(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("unsupported: ! fakeengine")
	}
	if len(args) == 2 && args[0] == "-dump" {
		e, ok := engines.Load(ts)
		if !ok {
			ts.Fatalf("fakeengine -dump: no engine was started in this script")
		}
		var b strings.Builder
		for _, r := range e.(*testkit.Engine).Log() {
			for _, m := range r.Messages {
				fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content)
			}
		}
		ts.Check(os.WriteFile(ts.MkAbs(args[1]), []byte(b.String()), 0o644))
		return
	}
	if len(args) != 1 {
		ts.Fatalf("usage: fakeengine RULES.json | fakeengine -dump FILE")
	}
	var raw []struct {
		Match string `json:"match"`
		Calls []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"calls"`
		Rounds  int    `json:"rounds"`
		Reply   string `json:"reply"`
		Offered bool   `json:"offered"`
	}
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &raw))
	var rules []testkit.ToolRule
	for _, r := range raw {
		rule := testkit.ToolRule{Match: r.Match, Rounds: r.Rounds, Reply: r.Reply, Offered: r.Offered}
		for _, c := range r.Calls {
			rule.Calls = append(rule.Calls, testkit.ScriptedCall{Name: c.Name, Arguments: string(c.Arguments)})
		}
		rules = append(rules, rule)
	}
	engine := testkit.NewEngine(testkit.Config{KeepRequests: true, ToolRules: rules})
	srv := testkit.NewServer(engine)
	url, err := srv.Start("127.0.0.1:0")
	ts.Check(err)
	engines.Store(ts, engine)
	ts.Setenv("OPENAI_BASE_URL", url)
	ts.Defer(func() {
		engines.Delete(ts)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
}
