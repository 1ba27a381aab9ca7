package agentinstall

import (
	"strings"
	"testing"
)

var testTOML = tomlEntry{table: []string{"mcp_servers", "luft"}, command: `/opt/luft "x"/luft`, args: []string{"mcp", "serve"}}

const luftBlock = "[mcp_servers.luft]\ncommand = \"/opt/luft \\\"x\\\"/luft\"\nargs = [\"mcp\", \"serve\"]\n"

func TestInstallTOML(t *testing.T) {
	tests := []struct {
		name, in, want string
		changed        bool
		err            string
	}{{
		name: "empty", in: "", want: luftBlock, changed: true,
	}, {
		name:    "comments and layout kept; a blank line before the new table",
		in:      "# my config\nmodel = \"o3\"   # the good one\n\n[mcp_servers.other]\ncommand = \"x\"\n",
		want:    "# my config\nmodel = \"o3\"   # the good one\n\n[mcp_servers.other]\ncommand = \"x\"\n\n" + luftBlock,
		changed: true,
	}, {
		name:    "no final newline",
		in:      "model = \"o3\"",
		want:    "model = \"o3\"\n\n" + luftBlock,
		changed: true,
	}, {
		name:    "existing table: only command and args lines change; the user's keys, comments and sub-table stay",
		in:      "[mcp_servers.\"luft\"] # luft\n# the path\ncommand = \"/old/luft\"\nstartup_timeout_sec = 20\nargs = [\n  \"mcp\",   # multi-line\n  \"serve\",\n]\n\n# next\n[mcp_servers.luft.env]\nLUFT_HOME = \"/x\"\n",
		want:    "[mcp_servers.\"luft\"] # luft\n# the path\ncommand = \"/opt/luft \\\"x\\\"/luft\"\nstartup_timeout_sec = 20\nargs = [\"mcp\", \"serve\"]\n\n# next\n[mcp_servers.luft.env]\nLUFT_HOME = \"/x\"\n",
		changed: true,
	}, {
		name:    "missing keys are added after the table's last key",
		in:      "[mcp_servers.luft]\nenabled = true\n\n[other]\na = 1\n",
		want:    "[mcp_servers.luft]\nenabled = true\ncommand = \"/opt/luft \\\"x\\\"/luft\"\nargs = [\"mcp\", \"serve\"]\n\n[other]\na = 1\n",
		changed: true,
	}, {
		name: "already registered",
		in:   "[ mcp_servers . luft ]\nargs = ['mcp', 'serve']\ncommand = '/opt/luft \"x\"/luft'\n",
	}, {
		name:    "a header-like line inside a multi-line string is not a table",
		in:      "notes = \"\"\"\n[mcp_servers.luft]\ncommand = \"nope\"\n\"\"\"\n",
		want:    "notes = \"\"\"\n[mcp_servers.luft]\ncommand = \"nope\"\n\"\"\"\n\n" + luftBlock,
		changed: true,
	},
		{name: "malformed", in: "model = \n", err: "line 1"},
		{name: "inline table", in: "mcp_servers = { other = { command = \"x\" } }\n", err: "inline table"},
		{name: "luft as an inline table", in: "[mcp_servers]\nluft = { command = \"x\" }\n", err: "not a [mcp_servers.luft] table of its own"},
		{name: "luft as dotted keys", in: "mcp_servers.luft.command = \"x\"\n", err: "not a [mcp_servers.luft] table of its own"},
		{name: "luft is a string", in: "[mcp_servers]\nluft = \"x\"\n", err: "mcp_servers.luft is not a table"},
		{name: "array of tables", in: "[[mcp_servers]]\nname = \"x\"\n", err: "inline table"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := installTOML(tc.in, testTOML)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if changed && got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			if !changed && got != tc.in {
				t.Fatalf("unchanged, but the text differs:\n%s", got)
			}
		})
	}
}

func TestUninstallTOML(t *testing.T) {
	tests := []struct {
		name, in, want string
		changed        bool
		err            string
	}{{
		name:    "the table, its sub-tables and the blank line before it go; the next table's comment stays",
		in:      "model = \"o3\"\n\n[mcp_servers.luft]\ncommand = \"x\"\n\n# other\n[mcp_servers.other]\ncommand = \"y\"\n\n[mcp_servers.luft.env]\nA = \"1\"\n",
		want:    "model = \"o3\"\n\n# other\n[mcp_servers.other]\ncommand = \"y\"\n",
		changed: true,
	}, {
		name: "not there", in: "model = \"o3\"\n",
	}, {
		name: "inline", in: "[mcp_servers]\nluft = { command = \"x\" }\n", err: "remove it by hand",
	}, {
		name: "an explicit parent table stays", in: "[mcp_servers]\n\n[mcp_servers.luft]\ncommand = \"x\"\n", want: "[mcp_servers]\n", changed: true,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := uninstallTOML(tc.in, testTOML)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed || changed && got != tc.want {
				t.Fatalf("changed = %v, got\n%s\nwant (changed = %v)\n%s", changed, got, tc.changed, tc.want)
			}
		})
	}
}

// Install then uninstall gives back the original bytes of a file that ends with one
// newline (how Codex and editors write it).
func TestTOMLRoundTrip(t *testing.T) {
	for _, orig := range []string{
		"",
		"model = \"o3\"\n",
		"# top\n[profiles.fast]\nmodel = \"o4-mini\" # quick\n\n[mcp_servers.other]\ncommand = \"x\"\nargs = [\n  \"a\",\n]\n",
		"# written on Windows\r\nmodel = \"o3\"\r\n\r\n[mcp_servers.other]\r\ncommand = 'x'\r\n",
	} {
		in, _, err := installTOML(orig, testTOML)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := uninstallTOML(in, testTOML)
		if err != nil {
			t.Fatal(err)
		}
		if out != orig {
			t.Fatalf("round trip of %q gave %q", orig, out)
		}
	}
}

func TestSplitTOMLHostile(t *testing.T) {
	for _, src := range []string{
		"a = \"unterminated\n",
		"a = '''never closed\n",
		"[\"unterminated key\n",
		"= 1\n",
		strings.Repeat("[", 10000),
		"a = " + strings.Repeat("[", 100000),
	} {
		if _, _, err := installTOML(src, testTOML); err == nil {
			t.Errorf("installTOML(%.40q) accepted a broken file", src)
		}
	}
}

// Codex's per-tool settings: installed with luft's table, added to an older install that
// lacks them, a tool table the user wrote is left alone, and uninstall removes them all.
func TestInstallTOMLTools(t *testing.T) {
	e := tomlEntry{table: []string{"mcp_servers", "luft"}, command: "/opt/luft", args: []string{"mcp", "serve"},
		tools: map[string]map[string]string{"spawn": {"approval_mode": "approve"}, "run": {"approval_mode": "approve"}}}
	const block = "[mcp_servers.luft]\ncommand = \"/opt/luft\"\nargs = [\"mcp\", \"serve\"]\n"
	const tools = "\n[mcp_servers.luft.tools.run]\napproval_mode = \"approve\"\n\n[mcp_servers.luft.tools.spawn]\napproval_mode = \"approve\"\n"
	for _, tc := range []struct{ name, in, want string }{
		{"new", "", block + tools},
		{"older install", "model = \"o3\"\n\n" + block, "model = \"o3\"\n\n" + block + tools},
		{"the user's own setting", block + "\n[mcp_servers.luft.tools.spawn]\napproval_mode = \"prompt\"\n",
			block + "\n[mcp_servers.luft.tools.spawn]\napproval_mode = \"prompt\"\n" + "\n[mcp_servers.luft.tools.run]\napproval_mode = \"approve\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := installTOML(tc.in, e)
			if err != nil || !changed || got != tc.want {
				t.Fatalf("install: changed %v, err %v\n%s\nwant\n%s", changed, err, got, tc.want)
			}
			again, changed, err := installTOML(got, e)
			if err != nil || changed || again != got {
				t.Fatalf("a second install changed %v (err %v):\n%s", changed, err, again)
			}
			out, _, err := uninstallTOML(got, e)
			if err != nil || strings.Contains(out, "luft") {
				t.Fatalf("uninstall: err %v\n%s", err, out)
			}
		})
	}
}
