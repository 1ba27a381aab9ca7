package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
)

func TestParseStatus(t *testing.T) {
	m, err := parseStatus("status", bufio.NewScanner(strings.NewReader("Name:\tluft\nVmHWM:\t   41234 kB\nVmRSS:\t   39000 kB\nThreads:\t9\n")))
	if err != nil || m != (mem{rss: 39000, hwm: 41234}) {
		t.Errorf("parseStatus = %+v, %v; want rss 39000 hwm 41234", m, err)
	}
	for _, bad := range []string{"Name:\tluft\n", "VmRSS:\t12 MB\nVmHWM:\t13 kB\n", "VmRSS:\tx kB\nVmHWM:\t13 kB\n"} {
		if m, err := parseStatus("status", bufio.NewScanner(strings.NewReader(bad))); err == nil {
			t.Errorf("parseStatus(%q) = %+v, want an error", bad, m)
		}
	}
	own, err := readMem(os.Getpid())
	if err != nil {
		t.Skipf("no /proc/PID/status here: %v", err)
	}
	if own.rss <= 0 || own.hwm < own.rss {
		t.Errorf("this process: VmRSS %d kB, VmHWM %d kB; want 0 < RSS <= HWM", own.rss, own.hwm)
	}
}

func TestParseStat(t *testing.T) {
	// A command name may hold spaces and parentheses.
	d, err := parseStat("4242 (luft (x) y) S 1 2 3 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 1000 2000")
	if err != nil || d != 3*time.Second {
		t.Errorf("parseStat = %v, %v; want 3s (300 ticks)", d, err)
	}
	if _, err := parseStat("4242 (luft) S 1 2"); err == nil {
		t.Error("a short stat line parsed")
	}
	d, err = parseProcStat("cpu  100 20 30 1000 50 5 5 10 7 0\ncpu0 1 2 3 4\n")
	if err != nil || d != 1700*time.Millisecond { // user+nice+system+irq+softirq+steal = 170 ticks
		t.Errorf("parseProcStat = %v, %v; want 1.7s", d, err)
	}
	if _, err := parseProcStat("intr 1 2 3\n"); err == nil {
		t.Error("a /proc/stat without the cpu line parsed")
	}
}

func TestStat(t *testing.T) {
	if got := stat([]float64{3, 1, 2, 10, 4}, "%.0f"); got != "3 (1–10)" {
		t.Errorf("stat = %q", got)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
	if stat(nil, "%.0f") != "-" {
		t.Error("no samples should print -")
	}
}

// A small run of each part on real daemons: two nodes on one tight key meet no 429 and
// send only the runs' turns; a SIGKILLed node's runs are claimed by the other, not long
// before its lease lapses (a lease runs from the last renewal, which on a loaded machine
// may have come well before the kill: half the lease is the bound checked).
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds luft and starts daemons")
	}
	if ok, msg := pgtest.Available(); !ok {
		t.Skip(msg)
	}
	cfg := config{luft: filepath.Join(t.TempDir(), "luft"), rounds: 2, width: 4,
		lease: 2 * time.Second, heartbeat: 200 * time.Millisecond}
	if err := build(cfg.luft, "../../cmd/luft"); err != nil {
		t.Fatal(err)
	}
	wl := workload{limit: 8, period: time.Second, runs: 2}
	r, err := throughputRep(cfg, wl, 2)
	if err != nil {
		t.Fatal(err)
	}
	if turns := wl.runs * cfg.rounds * cfg.width; r.rejected != 0 || r.requests != turns {
		t.Errorf("%d requests, %d × 429; want the %d turns and no 429", r.requests, r.rejected, turns)
	}
	if len(r.idle) != 2 || r.idle[0] <= 0 || r.run[0] <= 0 || r.hwm[0] < r.run[0] {
		t.Errorf("memory per node: idle %v, during %v, peak %v", r.idle, r.run, r.hwm)
	}
	cfg.kills, cfg.limit, cfg.period = 1, 100, time.Second
	took, rejected, err := takeovers(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(took) != 2 || rejected != 0 {
		t.Fatalf("takeovers: %v, %d × 429; want 2 samples and no 429", took, rejected)
	}
	for _, d := range took {
		if d < cfg.lease/2 {
			t.Errorf("claimed %v after the kill, before the lease %v could lapse", d, cfg.lease)
		}
	}
	t.Logf("wall %v, takeovers %v", r.wall, took)
}
