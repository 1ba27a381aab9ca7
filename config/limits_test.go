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
