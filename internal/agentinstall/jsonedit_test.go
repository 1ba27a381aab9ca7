package agentinstall

import (
	"encoding/json"
	"strings"
	"testing"
)

var testEntry = jsonEntry{container: "mcpServers", fields: object{
	{key: "type", raw: marshalValue("stdio")},
	{key: "command", raw: marshalValue("/opt/luft & co/luft")},
	{key: "args", raw: marshalValue([]string{"mcp", "serve"})},
}}

func TestInstallJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string // exact output; "" when unchanged or an error is expected
		changed bool
		err     string
	}{{
		name:    "empty file",
		in:      "",
		want:    "{\n  \"mcpServers\": {\n    \"luft\": {\n      \"type\": \"stdio\",\n      \"command\": \"/opt/luft & co/luft\",\n      \"args\": [\n        \"mcp\",\n        \"serve\"\n      ]\n    }\n  }\n}\n",
		changed: true,
	}, {
		name:    "keys, order, numbers and escapes kept; layout kept",
		in:      "{\n\t\"zeta\": 1.50e10,\n\t\"big\": 12345678901234567890,\n\t\"s\": \"\\u00e9<tag>\",\n\t\"mcpServers\": {\n\t\t\"other\": {\"command\": \"x\"}\n\t},\n\t\"alpha\": []\n}",
		want:    "{\n\t\"zeta\": 1.50e10,\n\t\"big\": 12345678901234567890,\n\t\"s\": \"\\u00e9<tag>\",\n\t\"mcpServers\": {\n\t\t\"other\": {\"command\": \"x\"},\n\t\t\"luft\": {\n\t\t\t\"type\": \"stdio\",\n\t\t\t\"command\": \"/opt/luft & co/luft\",\n\t\t\t\"args\": [\n\t\t\t\t\"mcp\",\n\t\t\t\t\"serve\"\n\t\t\t]\n\t\t}\n\t},\n\t\"alpha\": []\n}",
		changed: true,
	}, {
		name:    "compact file stays compact",
		in:      `{"a":true}` + "\n",
		want:    `{"a":true,"mcpServers":{"luft":{"type":"stdio","command":"/opt/luft & co/luft","args":["mcp","serve"]}}}` + "\n",
		changed: true,
	}, {
		name:    "the user's own keys in luft's entry are kept",
		in:      `{"mcpServers":{"luft":{"command":"/old/luft","env":{"LUFT_HOME":"/x"},"args":["mcp","serve"],"type":"stdio"}}}`,
		want:    `{"mcpServers":{"luft":{"command":"/opt/luft & co/luft","env":{"LUFT_HOME":"/x"},"args":["mcp","serve"],"type":"stdio"}}}`,
		changed: true,
	}, {
		name: "already registered",
		in:   `{"mcpServers":{"luft":{"type":"stdio","command":"/opt/luft & co/luft","args":["mcp", "serve"],"env":{}}}}`,
	}, {
		name:    "BOM kept",
		in:      "\uFEFF{}",
		want:    "\uFEFF{\n  \"mcpServers\": {\n    \"luft\": {\n      \"type\": \"stdio\",\n      \"command\": \"/opt/luft & co/luft\",\n      \"args\": [\n        \"mcp\",\n        \"serve\"\n      ]\n    }\n  }\n}\n",
		changed: true,
	}, {
		name:    "duplicate key: the last one (the one agents read) is edited",
		in:      `{"mcpServers":{"luft":1,"luft":{"type":"stdio","command":"/opt/luft & co/luft","args":["mcp","serve"]}}}`,
		changed: false,
	},
		{name: "comments", in: "{\n  // mine\n  \"a\": 1\n}", err: "line 2, column 3"},
		{name: "trailing comma", in: `{"a": 1,}`, err: "invalid character '}'"},
		{name: "not an object", in: `[1, 2]`, err: "not a JSON object"},
		{name: "two objects", in: `{} {}`, err: "more data after"},
		{name: "container is null", in: `{"mcpServers": null}`, err: `"mcpServers" is not an object (it is null)`},
		{name: "container is an array", in: `{"mcpServers": []}`, err: "it is an array"},
		{name: "entry is a string", in: `{"mcpServers": {"luft": "x"}}`, err: "mcpServers.luft is not an object (it is a string)"},
		{name: "unterminated", in: `{"a": "b`, err: "ends in the middle"},
		{name: "nested too deep", in: `{"a": ` + strings.Repeat("[", 100000), err: "exceeded max depth"},
		{name: "a NUL byte", in: "{\"a\": \"\x00\"}", err: "invalid character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseJSONDoc([]byte(tc.in))
			var changed bool
			if err == nil {
				changed, err = installJSON(d, testEntry)
			}
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
			if !changed {
				return
			}
			got := string(d.encode())
			if got != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(got, "\uFEFF")), &v); err != nil {
				t.Fatalf("output is not JSON: %v", err)
			}
		})
	}
}

func TestUninstallJSON(t *testing.T) {
	tests := []struct {
		name, in, want string
		changed        bool
	}{
		{name: "only luft: the container goes too", in: `{"a":1,"mcpServers":{"luft":{"command":"x"}}}`, want: `{"a":1}`, changed: true},
		{name: "others stay", in: `{"mcpServers":{"x":{},"luft":{"command":"x"},"y":2}}`, want: `{"mcpServers":{"x":{},"y":2}}`, changed: true},
		{name: "not there", in: `{"mcpServers":{"x":{}}}`},
		{name: "no container", in: `{}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := parseJSONDoc([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			changed, err := uninstallJSON(d, testEntry)
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.changed {
				t.Fatalf("changed = %v, want %v", changed, tc.changed)
			}
			if changed && string(d.encode()) != tc.want {
				t.Fatalf("got %s, want %s", d.encode(), tc.want)
			}
		})
	}
}

// An install followed by an uninstall gives back the original bytes of a file written the
// way agents write theirs (JSON.stringify with two spaces).
func TestJSONRoundTrip(t *testing.T) {
	orig := "{\n  \"numStartups\": 3,\n  \"projects\": {\n    \"/w\": {\n      \"allowedTools\": []\n    }\n  },\n  \"mcpServers\": {\n    \"other\": {\n      \"command\": \"x\"\n    }\n  }\n}"
	d, err := parseJSONDoc([]byte(orig))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := installJSON(d, testEntry); !ok || err != nil {
		t.Fatalf("install: %v %v", ok, err)
	}
	d2, err := parseJSONDoc(d.encode())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := uninstallJSON(d2, testEntry); !ok || err != nil {
		t.Fatalf("uninstall: %v %v", ok, err)
	}
	if got := string(d2.encode()); got != orig {
		t.Fatalf("round trip changed the file:\n%s\nwant\n%s", got, orig)
	}
}
