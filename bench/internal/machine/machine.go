// Package machine describes the machine a benchmark runs on — CPU model, cores, load
// average, Go version — so that every bench prints it beside its figures and a figure
// that moved can be told apart from a machine that did.
package machine

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// Info is the machine at one moment.
type Info struct {
	CPU        string // the CPU model, "unknown" where it cannot be read
	Cores      int    // logical CPUs (runtime.NumCPU)
	GOMAXPROCS int
	Load       string // the 1, 5 and 15 minute load averages, "unknown" where unavailable
	Go         string // runtime.Version()
	OS, Arch   string
}

// Read describes this machine now.
func Read() Info {
	return Info{
		CPU: cpuModel(readFile("/proc/cpuinfo")), Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0),
		Load: loadAvg(readFile("/proc/loadavg")), Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
	}
}

// String is the one-line form the benches print.
func (i Info) String() string {
	return fmt.Sprintf("machine: %s · %d cores (GOMAXPROCS %d) · load average %s · %s %s/%s",
		i.CPU, i.Cores, i.GOMAXPROCS, i.Load, i.Go, i.OS, i.Arch)
}

// Print writes the machine's line to w.
func Print(w io.Writer) { fmt.Fprintln(w, Read()) }

// PrintLoad writes the load average alone (for the end of a long run, beside the one at
// its start).
func PrintLoad(w io.Writer) {
	fmt.Fprintf(w, "load average at the end: %s\n", loadAvg(readFile("/proc/loadavg")))
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}

// cpuModel reads the first model name (x86) or, failing that, Hardware/Processor/
// CPU part (ARM) line of a /proc/cpuinfo text.
func cpuModel(cpuinfo string) string {
	found := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if _, dup := found[k]; !dup && v != "" {
			found[k] = v
		}
	}
	for _, k := range []string{"model name", "Hardware", "Processor", "cpu model", "CPU part"} {
		if v := found[k]; v != "" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown"
}

// loadAvg reads the three load averages of a /proc/loadavg text.
func loadAvg(s string) string {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
