package luft_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft"
)

// crashChildEnv makes the test binary the process TestResumeAfterKill kills: it starts
// crashScript in the state dir the variable names and prints the run's id once the run is
// inside its second call, then waits to be killed.
const crashChildEnv = "LUFT_TEST_CRASH_CHILD"

const crashScript = `function main()
  local a = agent{prompt="one"}
  local b = agent{prompt="two"}
  report(a.output .. "|" .. b.output)
end`

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

func crashChild(dir string) {
	b, entered := blockOn("two")
	eng, err := luft.New(luft.Options{StateDir: dir, Backend: "m", Getenv: func(string) string { return "" }},
		luft.WithBackend("m", b))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	run, err := eng.Start(context.Background(), luft.Script{Source: crashScript})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	<-entered
	fmt.Println(run.ID())
	io.Copy(io.Discard, os.Stdin) // until the parent kills this process
	os.Exit(3)
}

// A process killed (SIGKILL) while its run is inside an agent call leaves the run
// interrupted; an Engine of another process resumes it without redoing the finished call.
func TestResumeAfterKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	// A deadline for the external process only: it must print its run id, then it is killed.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child printed no run id: %v; stderr: %s", err, stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	id := strings.TrimSpace(line)

	var mu sync.Mutex
	var asked []string
	eng := newEngine(t, luft.Options{StateDir: dir, Backend: "m"}, luft.WithBackend("m", luft.BackendFunc(
		func(ctx context.Context, req luft.Request) (luft.Response, error) {
			mu.Lock()
			asked = append(asked, req.Prompt)
			mu.Unlock()
			return luft.Response{Text: "echo " + req.Prompt}, nil
		})))
	info, err := eng.Status(t.Context(), id)
	if err != nil || info.Status != luft.StatusInterrupted {
		t.Fatalf("status of the killed run: %s %v, want interrupted", info.Status, err)
	}
	run, err := eng.Resume(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(run.Events())
	res, err := run.Wait()
	if err != nil || res.Status != luft.StatusCompleted || res.Report != "echo one|echo two" {
		t.Fatalf("resumed: %s %v %v", res.Status, res.Report, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 || asked[0] != "two" || res.Agents.Cached != 1 || res.Attempt != 2 {
		t.Fatalf("the backend was asked %v (cached %d, attempt %d); want only the call that never finished", asked, res.Agents.Cached, res.Attempt)
	}
	checkStream(t, evs)
	if evs[0].Data["resumed"] != true {
		t.Fatalf("run_started of the resumed attempt: %v", evs[0].Data)
	}
}
