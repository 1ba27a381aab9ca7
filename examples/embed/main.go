// Command embed runs a luft workflow from a Go program through the root package luft:
// it opens an Engine over a state dir, starts the workflow on the offline mock backend,
// prints the run's events as they are recorded, and then its report.
//
//	go run ./examples/embed                          # the built-in workflow
//	go run ./examples/embed -workflow examples/hello.lua -args '{"name": "Ada"}'
//	go run ./examples/embed -json                    # events as JSON lines
//
// The state dir (-state-dir, default .luft) is the CLI's too: `luft list` shows the run.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/luft-run/luft"
)

// workflow is the script run when -workflow is not given: three reviewers in parallel,
// then one summary.
const workflow = `function main()
  phase("review")
  local topics = args.topics or {"security", "performance", "readability"}
  local reviews = parallel(topics, function(topic)
    return agent{name = "reviewer " .. topic, prompt = "Review the code for " .. topic .. " problems."}.output
  end)
  phase("summary")
  local s = agent{name = "summarizer", prompt = "Summarize: " .. table.concat(reviews, "; ")}
  report({reviews = reviews, summary = s.output})
end`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program with its arguments and output; it returns the exit code.
func run(ctx context.Context, argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("embed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", ".luft", "where runs are kept")
	path := fs.String("workflow", "", "a workflow file to run instead of the built-in one")
	argsJSON := fs.String("args", "", "the script's args as a JSON object")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	script := luft.Script{Path: *path}
	if *path == "" {
		script = luft.Script{Path: "review.lua", Source: workflow}
	}
	if *argsJSON != "" {
		if err := json.Unmarshal([]byte(*argsJSON), &script.Args); err != nil {
			fmt.Fprintf(stderr, "embed: -args is not JSON: %v\n", err)
			return 2
		}
	}

	eng, err := luft.New(luft.Options{StateDir: *stateDir, Backend: "mock"})
	if err != nil {
		fmt.Fprintln(stderr, "embed:", err)
		return 2
	}
	defer eng.Close()

	r, err := eng.Start(ctx, script)
	if err != nil {
		fmt.Fprintln(stderr, "embed:", err)
		return 2
	}
	fmt.Fprintln(stderr, "run", r.ID())
	enc := json.NewEncoder(stdout)
	for ev := range r.Events() {
		if *asJSON {
			enc.Encode(ev)
			continue
		}
		switch ev.Type {
		case luft.EventPhaseStarted:
			fmt.Fprintf(stdout, "phase %s\n", ev.Field("label"))
		case luft.EventAgentDone:
			fmt.Fprintf(stdout, "  %s %s %s\n", ev.Field("call_key"), ev.Field("name"), ev.Field("status"))
		case luft.EventLog:
			fmt.Fprintf(stdout, "  log: %s\n", ev.Field("msg"))
		}
	}

	res, err := r.Wait()
	var se *luft.ScriptError
	switch {
	case errors.As(err, &se):
		fmt.Fprintf(stderr, "embed: the script failed at %s: %s\n", se.Where, se.Msg)
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "embed: run %s %s: %v\n", res.RunID, res.Status, err)
		return 1
	}
	if !*asJSON {
		rep, _ := json.MarshalIndent(res.Report, "", "  ")
		fmt.Fprintf(stdout, "%s in %d tokens\nreport: %s\n", res.Status, res.Usage.Total(), rep)
	}
	return 0
}
