package machine

import (
	"runtime"
	"strings"
	"testing"
)

func TestCPUModel(t *testing.T) {
	for in, want := range map[string]string{
		"processor\t: 0\nmodel name\t: Intel(R) Xeon(R)   CPU @ 2.20GHz\nprocessor\t: 1\nmodel name\t: other\n": "Intel(R) Xeon(R) CPU @ 2.20GHz",
		"processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n":                                                "0xd0c",
		"": "unknown",
	} {
		if got := cpuModel(in); got != want {
			t.Errorf("cpuModel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadAvg(t *testing.T) {
	if got := loadAvg("2.89 2.08 2.04 3/512 12345\n"); got != "2.89 2.08 2.04" {
		t.Errorf("loadAvg = %q", got)
	}
	if got := loadAvg(""); got != "unknown" {
		t.Errorf("empty: %q", got)
	}
}

func TestString(t *testing.T) {
	s := Read().String()
	for _, want := range []string{"machine: ", " cores (GOMAXPROCS ", "load average ", runtime.Version()} {
		if !strings.Contains(s, want) {
			t.Errorf("%q lacks %q", s, want)
		}
	}
}
