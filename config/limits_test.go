package config

import (
	"math"
	"strings"
	"testing"
)

func TestCheckRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // "" = accepted
	}{
		{"int inside", CheckRange(4, 0, MaxSlots), ""},
		{"int at the top", CheckRange(MaxSlots, 0, MaxSlots), ""},
		{"int above", CheckRange(MaxSlots+1, 0, MaxSlots), "must be at most 100000 (got 100001)"},
		{"int64 far above", CheckRange(int64(math.MaxInt64), 0, int64(MaxTPM)), "must be at most 1000000000000 (got 9223372036854775807)"},
		{"negative", CheckRange(-1, 0, 10), "must not be negative (got -1)"},
		{"below a floor of 1", CheckRange(0, 1, 10), "must be at least 1 (got 0)"},
		{"float inside", CheckRange(0.59, 0, MaxPricePerMTok), ""},
		{"NaN", CheckRange(math.NaN(), 0, MaxPricePerMTok), "must be a finite number (got NaN)"},
		{"+Inf", CheckRange(math.Inf(1), 0, MaxPricePerMTok), "must be a finite number (got +Inf)"},
		{"-Inf", CheckRange(math.Inf(-1), 0, MaxPricePerMTok), "must be a finite number (got -Inf)"},
		{"negative float", CheckRange(-0.5, 0, MaxPricePerMTok), "must not be negative (got -0.5)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ""
			if tc.err != nil {
				got = tc.err.Error()
			}
			if got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// Every numeric and URL key is range-checked; the error names the file, the line and the
// key.
func TestRangesInTheFile(t *testing.T) {
	head := "[backends.b]\ntype = \"openai\"\n"
	for _, tc := range []struct{ name, src, want string }{
		{"max_concurrency overflow", head + "max_concurrency = 9223372036854775807\n",
			"c.toml:3: backends.b.max_concurrency: must be at most 100000 (got 9223372036854775807)"},
		{"tpm", head + "tpm = 1000000000001\n", "c.toml:3: backends.b.tpm: must be at most 1000000000000 (got 1000000000001)"},
		{"rpm", head + "rpm = 99999999999\n", "c.toml:3: backends.b.rpm: must be at most 1000000000 (got 99999999999)"},
		{"max_turns", head + "max_turns = 1000000\n", "c.toml:3: backends.b.max_turns: must be at most 10000 (got 1000000)"},
		{"scheduler slots", "[scheduler]\nslots = 100001\n", "c.toml:2: scheduler.slots: must be at most 100000 (got 100001)"},
		{"price nan", head + "price_input_per_mtok = nan\n", "c.toml:3: backends.b.price_input_per_mtok: must be a finite number (got NaN)"},
		{"price inf", head + "price_output_per_mtok = inf\n", "c.toml:3: backends.b.price_output_per_mtok: must be a finite number (got +Inf)"},
		{"price -inf", head + "price_output_per_mtok = -inf\n", "c.toml:3: backends.b.price_output_per_mtok: must be a finite number (got -Inf)"},
		{"price negative", head + "price_input_per_mtok = -1.5\n", "c.toml:3: backends.b.price_input_per_mtok: must not be negative (got -1.5)"},
		{"price huge", head + "price_input_per_mtok = 1e300\n", "c.toml:3: backends.b.price_input_per_mtok: must be at most 1e+06 (got 1e+300)"},
		{"base_url without scheme", head + "base_url = \"localhost:8000/v1\"\n",
			`c.toml:3: backends.b.base_url: not an http or https URL: "localhost:8000/v1" (e.g. "http://127.0.0.1:8000/v1")`},
		{"replica not a URL", head + "replicas = [\"http://gpu2:8000/v1\", \"http://[::1\"]\n",
			`c.toml:3: backends.b.replicas: replica 2: not a URL: "http://[::1" (e.g. "http://127.0.0.1:8000/v1")`},
		{"replica without host", head + "replicas = [\"http:///v1\"]\n",
			`c.toml:3: backends.b.replicas: replica 1: URL has no host: "http:///v1" (e.g. "http://127.0.0.1:8000/v1")`},
		{"replica of another scheme", head + "replicas = [\"ftp://gpu2/v1\"]\n",
			`c.toml:3: backends.b.replicas: replica 1: not an http or https URL: "ftp://gpu2/v1" (e.g. "http://127.0.0.1:8000/v1")`},
		{"mcp url", "[mcp_servers.m]\nurl = \"not a url\"\n",
			`c.toml:2: mcp_servers.m.url: not an http or https URL: "not a url" (e.g. "http://127.0.0.1:8000/v1")`},
		{"int beyond int64", head + "max_concurrency = 99999999999999999999\n", "c.toml:3: backends.b.max_concurrency: "},
		{"fine", head + "base_url = \"https://api.example.com/v1\"\nreplicas = [\"http://gpu2:8000/v1\"]\nmax_concurrency = 100000\ntpm = 30000000\nprice_input_per_mtok = 0.59\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tc.src))
			got := ""
			if err != nil {
				got = err.Error()
			}
			if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) || tc.want != "" && got == "" {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

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

// The keys added with [limits], [tools] env and writable, pass_env, a backend's env and
// planner_model refuse a value of the wrong type, and a bad name anywhere in a huge list,
// with the file, the line and the key.
func TestNewKeysHostile(t *testing.T) {
	huge := strings.Repeat(`"GOPATH", `, 100_000) + `"NOT A NAME"`
	for _, tc := range []struct{ name, src, want string }{
		{"limits string", "[limits]\nmax_log_bytes = \"1 GiB\"\n", "c.toml:2: limits.max_log_bytes: incompatible types"},
		{"limits float", "[limits]\nmax_events = 1.5\n", "c.toml:2: limits.max_events: incompatible types"},
		{"limits beyond int64", "[limits]\nmax_events_bytes = 99999999999999999999\n", "c.toml:2: limits.max_events_bytes: "},
		{"limits too large", "[limits]\nmax_events_bytes = 9223372036854775807\n",
			"c.toml:2: limits.max_events_bytes: must be 0 (the default) or between 1024 and 1099511627776 bytes (got 9223372036854775807)"},
		{"limits a table", "[limits.max_log_bytes]\nx = 1\n", "c.toml:1: limits.max_log_bytes"},
		{"tools env a string", "[tools]\nenv = \"GOPATH\"\n", "c.toml:2: tools.env: incompatible types"},
		{"tools env numbers", "[tools]\nenv = [1, 2]\n", "c.toml:2: tools.env"},
		{"tools env a bare star", "[tools]\nenv = [\"*\"]\n", `c.toml:2: tools.env: "*" is not an environment variable name`},
		{"tools env with =", "[tools]\nenv = [\"PATH=/tmp\"]\n", `c.toml:2: tools.env: "PATH=/tmp" is not an environment variable name`},
		{"tools env huge list", "[tools]\nenv = [" + huge + "]\n", `c.toml:2: tools.env: "NOT A NAME" is not an environment variable name`},
		{"writable a string", "[tools]\nwritable = \"/tmp\"\n", "c.toml:2: tools.writable: incompatible types"},
		{"writable numbers", "[tools]\nwritable = [5]\n", "c.toml:2: tools.writable"},
		{"pass_env a string", "[mcp_servers.m]\ncommand = \"m\"\npass_env = \"HOME\"\n", "c.toml:3: mcp_servers.m.pass_env: incompatible types"},
		{"pass_env a glob", "[mcp_servers.m]\ncommand = \"m\"\npass_env = [\"*TOKEN\"]\n", `c.toml:3: mcp_servers.m.pass_env: "*TOKEN" is not an environment variable name`},
		{"backend env a table", "[backends.b]\ntype = \"mock\"\n[backends.b.env]\nX = \"1\"\n", "c.toml:3: backends.b.env"},
		{"backend env a bad name", "[backends.b]\ntype = \"mock\"\nenv = [\"A-B\"]\n", `c.toml:3: backends.b.env: "A-B" is not an environment variable name`},
		{"planner_model a number", "planner_model = 3\n", "c.toml:1: planner_model: incompatible types"},
		{"planner_model a list", "planner_model = [\"a\"]\n", "c.toml:1: planner_model: incompatible types"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("c.toml", []byte(tc.src))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("got  %v\nwant %s...", err, tc.want)
			}
		})
	}
}
