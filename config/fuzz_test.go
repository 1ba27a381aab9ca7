package config

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// FuzzParse checks the loader on any bytes: Parse never panics; it returns either an
// *Error naming the file and a line within it (and, for a validation error, the key), or
// a Config whose values are in the ranges the loader promises, with warnings that name
// file:line.
//
// The range checks here are the ones Parse makes today (negative counts, durations and
// prices, undefined backends). Whether a price may be NaN or a replica URL malformed is
// the loader's validation to decide, not this target's.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.toml"))
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"", "=", "[", "[[a]]\n[[a]]", "a.b.c = 1\n[a]\n", "[backends.x]\ntype = 'mock'\nmax_concurrency = 9223372036854775807\n",
		"[backends.x]\ntype = \"mock\"\nprice_input_per_mtok = -inf\n", "[backends]\nx = 1\n",
		"[backends.'a.b']\ntype = 'mock'\nfallback = 'a.b'\n", "default_backend = \"\"\"\nx\n\"\"\"\n",
		"[tools]\ncommand_timeout = \"-1ns\"\n", "[scheduler]\nsuspend_after = \"9999999999h\"\n",
		"[mcp_servers.m]\nurl = 'http://x'\nenv = {A = 'b'}\n", "backends = { x = { type = 'mock', rpm = -1 } }\n",
		"[backends.\"\\u0000\"]\ntype = 'acp:'\n", "\ufeff[tools]\napproval = 'ask'\n",
	} {
		f.Add([]byte(s))
	}
	warnRE := regexp.MustCompile(`^cfg\.toml:[1-9][0-9]*: `)
	f.Fuzz(func(t *testing.T, data []byte) {
		const path = "cfg.toml"
		c, err := Parse(path, data)
		lines := strings.Count(string(data), "\n") + 1
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) {
				t.Fatalf("Parse error is a %T, not a *config.Error: %v", err, err)
			}
			if ce.File != path || !strings.HasPrefix(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			if ce.Line < 1 || ce.Line > lines {
				t.Fatalf("error line %d outside the file's %d lines: %v", ce.Line, lines, err)
			}
			if !isZeroConfig(c) {
				t.Fatalf("Parse failed (%v) but returned a Config: %+v", err, c)
			}
			return
		}
		if c.Path != path {
			t.Fatalf("Config.Path = %q, want %q", c.Path, path)
		}
		for _, w := range c.Warnings {
			if !warnRE.MatchString(w) {
				t.Fatalf("warning does not name file:line: %q", w)
			}
		}
		if c.DefaultBackend != "" {
			if _, ok := c.Backends[c.DefaultBackend]; !ok {
				t.Fatalf("default_backend %q is not defined but was accepted", c.DefaultBackend)
			}
		}
		if c.Scheduler.Slots < 0 || c.Scheduler.SuspendAfter < 0 || c.Tools.CommandTimeout < 0 {
			t.Fatalf("negative scheduler or tools setting accepted: %+v %+v", c.Scheduler, c.Tools)
		}
		if c.Tools.Approval != "" && !slices.Contains(Approvals, c.Tools.Approval) {
			t.Fatalf("unknown approval %q accepted", c.Tools.Approval)
		}
		for id, b := range c.Backends {
			if b.MaxConcurrency < 0 || b.TPM < 0 || b.RPM < 0 || b.MaxTurns < 0 || b.IdleTimeout < 0 ||
				b.PriceInputPerMTok < 0 || b.PriceOutputPerMTok < 0 {
				t.Fatalf("backend %q: negative setting accepted: %+v", id, b)
			}
			if !slices.Contains(Types, b.Type) && !(strings.HasPrefix(b.Type, "acp:") && len(b.Type) > 4) {
				t.Fatalf("backend %q: unknown type %q accepted", id, b.Type)
			}
			if b.Fallback != "" {
				fb, ok := c.Backends[b.Fallback]
				if !ok || b.Fallback == id || fb.Type != b.Type {
					t.Fatalf("backend %q: fallback %q accepted", id, b.Fallback)
				}
			}
			slots, _, _, _, _ := c.Lane(id)
			if slots != b.MaxConcurrency {
				t.Fatalf("Lane(%q) slots %d, want %d", id, slots, b.MaxConcurrency)
			}
		}
		for id, s := range c.MCPServers {
			if (s.Command == "") == (s.URL == "") {
				t.Fatalf("mcp server %q: needs exactly one of command and url: %+v", id, s)
			}
		}
	})
}

// isZeroConfig reports whether c is the zero Config.
func isZeroConfig(c Config) bool {
	return c.Path == "" && c.DefaultBackend == "" && c.Backends == nil && c.MCPServers == nil &&
		c.Warnings == nil && c.Tools.Workspace == "" && len(c.Tools.AllowCommands) == 0
}
