//go:build unix

// Command tuiview measures what the live terminal view costs a run: the same 10,000-agent
// mock fan-out through `luft run`, with stderr a pseudo-terminal, once drawing the live
// board and once with --quiet (no view at all), and once with plain lines to a pipe.
// Runs alternate, each in a fresh state dir; the table shows the median wall time of each
// and the board's overhead against no view.
//
//	go run ./bench/tuiview [-n 10000] [-repeat 7]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/luft-run/luft/bench/internal/machine"
)

const workflow = `meta = { phases = { {label = "fan", description = "one wide fan-out"} } }
function main()
  phase("fan", args.n)
  local items = {}
  for i = 1, args.n do items[i] = i end
  local r = parallel(items, function(i) return agent{prompt = "item " .. i}.tokens end)
  report(#r)
end`

func main() {
	n := flag.Int("n", 10000, "agents in the fan-out")
	repeat := flag.Int("repeat", 7, "runs of each mode (the median is shown)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "luft-tuiview-")
	check(err)
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "luft")
	build := exec.Command("go", "build", "-o", bin, "./cmd/luft")
	build.Stderr = os.Stderr
	check(build.Run())
	check(os.WriteFile(filepath.Join(dir, "fan.lua"), []byte(workflow), 0o644))
	check(os.WriteFile(filepath.Join(dir, "luft.toml"), nil, 0o644))

	modes := []string{"none (--quiet, pty)", "live board (pty)", "plain lines (pipe)"}
	times := make([][]time.Duration, len(modes))
	for i := 0; i < *repeat; i++ {
		for m := range modes {
			d, err := runOnce(bin, dir, *n, m, i)
			check(err)
			times[m] = append(times[m], d)
		}
	}
	machine.Print(os.Stdout)
	fmt.Printf("luft terminal view overhead: %d mock agents in one parallel(), median of %d alternating runs\n\n", *n, *repeat)
	fmt.Printf("%-22s %10s %10s %10s %12s\n", "view", "median", "min", "max", "vs none")
	base := median(times[0])
	for m, name := range modes {
		med := median(times[m])
		fmt.Printf("%-22s %10s %10s %10s %+11.1f%%\n", name, med.Round(time.Millisecond), slices.Min(times[m]).Round(time.Millisecond),
			slices.Max(times[m]).Round(time.Millisecond), 100*(float64(med)/float64(base)-1))
	}
}

func runOnce(bin, dir string, n, mode, i int) (time.Duration, error) {
	state := filepath.Join(dir, fmt.Sprintf("state-%d-%d", mode, i))
	defer os.RemoveAll(state)
	args := []string{"--state-dir", state, "run", "-w", "fan.lua", "--args", fmt.Sprintf(`{"n": %d}`, n),
		"--max-agent-calls", fmt.Sprint(2 * n)}
	if mode == 0 {
		args = append(args, "--quiet")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "TERM=xterm-256color")
	var out bytes.Buffer
	cmd.Stdout = &out
	start := time.Now()
	if mode == 2 {
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("plain run: %v\n%s", err, errOut.String())
		}
		return time.Since(start), checkReport(out.String(), n)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return 0, err
	}
	defer ptmx.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		return 0, err
	}
	cmd.Stdin, cmd.Stderr = tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		tty.Close()
		return 0, err
	}
	tty.Close()
	drained := make(chan struct{})
	go func() { io.Copy(io.Discard, ptmx); close(drained) }()
	err = cmd.Wait()
	d := time.Since(start)
	ptmx.Close()
	<-drained
	if err != nil {
		return 0, fmt.Errorf("run in a pty (mode %d): %v", mode, err)
	}
	return d, checkReport(out.String(), n)
}

// checkReport makes sure a timed run did the whole fan-out: its report is n.
func checkReport(out string, n int) error {
	if strings.TrimSpace(out) != fmt.Sprint(n) {
		return fmt.Errorf("report %q, want %d", out, n)
	}
	return nil
}

func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "CI" || k == "TERM" || k == "NO_COLOR" || strings.HasPrefix(k, "LUFT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
