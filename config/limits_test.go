package config

import (
	"testing"
)

func TestLimits(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      Limits
		err       string
	}{
		{"none", "", Limits{}, ""},
		{"all", "[limits]\nmax_log_bytes = 4096\nmax_report_bytes = 2048\nmax_event_bytes = 8192\nmax_events = 500\nmax_events_bytes = 1048576\n",
			Limits{MaxLogBytes: 4096, MaxReportBytes: 2048, MaxEventBytes: 8192, MaxEvents: 500, MaxEventsBytes: 1 << 20}, ""},
		{"zero is the default", "[limits]\nmax_events = 0\n", Limits{}, ""},
		{"negative", "[limits]\nmax_log_bytes = -1\n", Limits{},
			"l.toml:2: limits.max_log_bytes: must be 0 (the default) or between 1024 and 1073741824 bytes (got -1)"},
		{"too small for the marker", "[limits]\n\nmax_report_bytes = 10\n", Limits{},
			"l.toml:3: limits.max_report_bytes: must be 0 (the default) or between 1024 and 1073741824 bytes (got 10)"},
		{"too many events", "[limits]\nmax_events = 99999999999\n", Limits{},
			"l.toml:2: limits.max_events: must be 0 (the default) or between 100 and 2147483648 events (got 99999999999)"},
		{"too few events", "[limits]\nmax_events = 3\n", Limits{},
			"l.toml:2: limits.max_events: must be 0 (the default) or between 100 and 2147483648 events (got 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("l.toml", []byte(tc.src))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got %v, want %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Limits != tc.want {
				t.Fatalf("limits %+v, want %+v", c.Limits, tc.want)
			}
		})
	}
}
