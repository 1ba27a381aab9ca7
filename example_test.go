package luft_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/luft-run/luft"
)

// stateDir is a fresh state dir for one example; the caller removes it.
func stateDir() string {
	dir, err := os.MkdirTemp("", "luft-example-")
	if err != nil {
		panic(err)
	}
	return dir
}

// Run a workflow to its end on the offline mock backend (the default when nothing else
// is configured) and read its report.
func ExampleEngine_Run() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	eng, err := luft.New(luft.Options{StateDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	res, err := eng.Run(context.Background(), luft.Script{
		Source: `function main()
  local r = agent{name="greeter", prompt="Say hello to " .. args.name}
  report({greeting = r.output, ok = r.ok})
end`,
		Args: map[string]any{"name": "Ada"},
	})
	if err != nil {
		fmt.Println("run failed:", err)
		return
	}
	fmt.Println(res.Status)
	fmt.Println(res.Report.(map[string]any)["greeting"])
	fmt.Println("tokens:", res.Usage.Total())
	// Output:
	// completed
	// mock: Say hello to Ada
	// tokens: 11
}

// Start a run and follow its events as they are recorded, in order, up to run_done.
func ExampleEngine_Start() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	eng, err := luft.New(luft.Options{StateDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	run, err := eng.Start(context.Background(), luft.Script{Source: `function main()
  phase("greet")
  local r = agent{name="greeter", prompt="Say hello"}
  log("the greeter answered")
  report(r.output)
end`})
	if err != nil {
		fmt.Println(err)
		return
	}
	for ev := range run.Events() {
		switch ev.Type {
		case luft.EventAgentDone:
			fmt.Println(ev.Seq, ev.Type, ev.Field("call_key"), ev.Field("status"))
		case luft.EventLog:
			fmt.Println(ev.Seq, ev.Type, ev.Field("msg"))
		default:
			fmt.Println(ev.Seq, ev.Type)
		}
	}
	res, err := run.Wait()
	fmt.Println(res.Status, err)
	// Output:
	// 1 run_started
	// 2 phase_started
	// 3 agent_started
	// 4 agent_done main/1 ok
	// 5 log the greeter answered
	// 6 phase_done
	// 7 report
	// 8 run_done
	// completed <nil>
}

// Cancel a run while an agent is working: the call is cancelled, the run ends as
// cancelled, and Wait's error matches ErrCancelled.
func ExampleRun_Cancel() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	working := make(chan struct{})
	slow := luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		close(working)
		<-ctx.Done() // a long model call, until it is cancelled
		return luft.Response{}, ctx.Err()
	})
	eng, err := luft.New(luft.Options{StateDir: dir, Backend: "slow"}, luft.WithBackend("slow", slow))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	run, err := eng.Start(context.Background(), luft.Script{Source: `function main()
  agent{prompt="think for a long time"}
end`})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-working
	run.Cancel()
	res, err := run.Wait()
	fmt.Println(res.Status, errors.Is(err, luft.ErrCancelled))
	// Output:
	// cancelled true
}

// Resume a run whose host stopped mid-way: the call that finished before the stop comes
// from the journal (cached), and only the unfinished one reaches the backend again.
func ExampleEngine_Resume() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	script := `function main()
  local a = agent{prompt="first"}
  local b = agent{prompt="second"}
  report(a.output .. " + " .. b.output)
end`

	// The first Engine stops while the second call is in flight, as a process that
	// shuts down would.
	inSecond := make(chan struct{})
	first := luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		if req.Prompt == "second" {
			close(inSecond)
			<-ctx.Done()
			return luft.Response{}, ctx.Err()
		}
		return luft.Response{Text: "answer to " + req.Prompt}, nil
	})
	eng, err := luft.New(luft.Options{StateDir: dir, Backend: "model"}, luft.WithBackend("model", first))
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := eng.Start(context.Background(), luft.Script{Source: script})
	if err != nil {
		fmt.Println(err)
		return
	}
	<-inSecond
	eng.Close()
	res, err := run.Wait()
	fmt.Println("first attempt:", res.Status, errors.Is(err, luft.ErrShutdown))

	// A new Engine over the same state dir resumes it.
	var mu sync.Mutex
	var asked []string
	second := luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		mu.Lock()
		asked = append(asked, req.Prompt)
		mu.Unlock()
		return luft.Response{Text: "answer to " + req.Prompt}, nil
	})
	eng, err = luft.New(luft.Options{StateDir: dir, Backend: "model"}, luft.WithBackend("model", second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	run, err = eng.Resume(context.Background(), run.ID())
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err = run.Wait()
	fmt.Println("resumed:", res.Status, res.Report, err)
	fmt.Println("cached calls:", res.Agents.Cached, "backend asked:", asked)
	// Output:
	// first attempt: suspended true
	// resumed: completed answer to first + answer to second <nil>
	// cached calls: 1 backend asked: [second]
}

// A custom backend: every call of Complete is a model turn the Engine's scheduler admits,
// so Options.Concurrency bounds how many run at once, across every branch of parallel().
func ExampleWithBackend() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	var mu sync.Mutex
	inFlight, most := 0, 0
	upper := luft.BackendFunc(func(ctx context.Context, req luft.Request) (luft.Response, error) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		defer func() {
			mu.Lock()
			inFlight--
			mu.Unlock()
		}()
		return luft.Response{Text: strings.ToUpper(req.Prompt), Usage: luft.Usage{Input: 3, Output: 3}}, nil
	})
	eng, err := luft.New(luft.Options{StateDir: dir, Backend: "upper", Concurrency: 1},
		luft.WithBackend("upper", upper))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()

	res, err := eng.Run(context.Background(), luft.Script{Source: `function main()
  local out = parallel({"a", "b", "c", "d"}, function(x)
    return agent{prompt=x}.output
  end)
  report(table.concat(out, ","))
end`})
	fmt.Println(res.Report, res.Usage.Total(), err)
	fmt.Println("most calls at once:", most)
	// Output:
	// A,B,C,D 24 <nil>
	// most calls at once: 1
}

// Status and List read the state dir: runs of this Engine, and of any process that
// shares the state dir (the luft CLI with --state-dir or LUFT_HOME).
func ExampleEngine_List() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	eng, err := luft.New(luft.Options{StateDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	ctx := context.Background()

	ok, _ := eng.Run(ctx, luft.Script{Path: "ok.lua", Source: `function main() report("fine") end`})
	_, err = eng.Run(ctx, luft.Script{Path: "broken.lua", Source: `function main() error("no input") end`})
	var se *luft.ScriptError
	fmt.Println(errors.As(err, &se), se.Where, se.Msg)

	info, err := eng.Status(ctx, ok.RunID[:13]) // a unique prefix names a run
	fmt.Println(info.Workflow, info.Status, info.Report, err)
	runs, err := eng.List(ctx, luft.ListOptions{})
	for _, r := range runs { // newest first
		fmt.Println(r.Workflow, r.Status)
	}
	// Output:
	// true broken.lua:1 no input
	// ok.lua completed fine <nil>
	// broken.lua failed
	// ok.lua completed
}

// Events reads a stored run's events, here every agent call's outcome.
func ExampleEngine_Events() {
	dir := stateDir()
	defer os.RemoveAll(dir)
	eng, err := luft.New(luft.Options{StateDir: dir})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	ctx := context.Background()
	res, _ := eng.Run(ctx, luft.Script{Source: `function main()
  agent{prompt="one"}
  agent{prompt="two"}
end`})
	for ev, err := range eng.Events(ctx, res.RunID, 0) {
		if err != nil {
			fmt.Println(err)
			break
		}
		if ev.Type == luft.EventAgentDone {
			fmt.Println(ev.Field("call_key"), ev.Field("status"))
		}
	}
	_, err = eng.Status(ctx, "no-such-run")
	var nf *luft.NotFoundError
	fmt.Println(errors.As(err, &nf))
	// Output:
	// main/1 ok
	// main/2 ok
	// true
}
