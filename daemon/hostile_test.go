package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// Every handler answers hostile input with a clear 4xx, never a panic or a 5xx.
func TestAPIHostileInput(t *testing.T) {
	d, svc := newTestDaemon(t)
	h := d.handler(false)
	code, body := call(t, h, "POST", "/api/runs", `{"script":"function main() report(1) end"}`)
	if code != http.StatusCreated {
		t.Fatalf("start: HTTP %d %s", code, body)
	}
	id := body[strings.Index(body, `"run_id":"`)+len(`"run_id":"`):]
	id = id[:strings.IndexByte(id, '"')]
	if _, err := svc.Wait(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	huge := `{"script":"` + strings.Repeat("x", 9<<20) + `"}`
	deep := `{"script":"function main() end","args":` + strings.Repeat(`{"x":`, 70) + "1" + strings.Repeat("}", 70) + "}"
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"start: body over 8 MiB", "POST", "/api/runs", huge, 400, "request body too large"},
		{"start: not JSON", "POST", "/api/runs", `{"script":`, 400, "not a start request"},
		{"start: a JSON array", "POST", "/api/runs", `[1,2]`, 400, "not a start request"},
		{"start: wrong field type", "POST", "/api/runs", `{"script":1}`, 400, "not a start request"},
		{"start: null", "POST", "/api/runs", `null`, 400, "give the workflow as script"},
		{"start: a host file as the script", "POST", "/api/runs", `{"path":"/etc/passwd"}`, 400, "/etc/passwd"},
		{"start: a missing file", "POST", "/api/runs", `{"path":"/nonexistent/../x.lua"}`, 400, "read workflow"},
		{"start: a folder", "POST", "/api/runs", `{"path":"/"}`, 400, "not a regular file"},
		{"start: a device", "POST", "/api/runs", `{"path":"/dev/zero"}`, 400, "not a regular file"},
		{"start: args nested too deep", "POST", "/api/runs", deep, 400, "deeper than the limit of 64 levels"},
		{"start: timeout out of range", "POST", "/api/runs", `{"script":"function main() end","timeout_ns":1e400}`, 400, "not a start request"},
		{"resume: body over 1 MiB", "POST", "/api/runs/" + id + "/resume", `{"caller":"` + strings.Repeat("x", 2<<20) + `"}`, 400, "request body too large"},
		{"resume: not JSON", "POST", "/api/runs/" + id + "/resume", `{`, 400, "not a resume request"},
		{"resume: unknown field", "POST", "/api/runs/" + id + "/resume", `{"force":true}`, 400, `unknown field \"force\"`},
		{"resume: unknown run", "POST", "/api/runs/nope/resume", ``, 404, "nope"},
		{"resume: the newest unfinished run, with none", "POST", "/api/runs/-/resume", ``, 404, "no unfinished run to resume"},
		{"resume: a finished run", "POST", "/api/runs/" + id + "/resume", `{}`, 200, `"status":"completed"`},
		{"approve: body over 64 KiB", "POST", "/api/runs/" + id + "/approve", `{"allow":true,"approval_id":"` + strings.Repeat("x", 70<<10) + `"}`, 400, "request body too large"},
		{"approve: not JSON", "POST", "/api/runs/" + id + "/approve", `{"allow":`, 400, "not an approval"},
		{"approve: a long approval id", "POST", "/api/runs/" + id + "/approve", `{"allow":false,"approval_id":"` + strings.Repeat("z", 4096) + `"}`, 404, "not 4096"},
		{"approve: a run waiting for nothing", "POST", "/api/runs/" + id + "/approve", `{"allow":true}`, 404, "waits for no"},
		{"approve: unknown run", "POST", "/api/runs/" + strings.Repeat("q", 4096) + "/approve", `{"allow":true}`, 404, "qqq"},
		{"cancel: unknown run", "POST", "/api/runs/nope/cancel", ``, 404, "nope"},
		{"report: unknown run", "GET", "/api/runs/nope/report", ``, 404, "nope"},
		{"events: unknown run", "GET", "/api/runs/nope/events", ``, 404, "nope"},
		{"events: unknown run, followed", "GET", "/api/runs/nope/events?follow=1", ``, 404, "nope"},
		{"events: since past int64", "GET", "/api/runs/" + id + "/events?since=99999999999999999999", ``, 400, "want a seq >= 0"},
		{"events: negative since", "GET", "/api/runs/" + id + "/events?since=-1", ``, 400, "want a seq >= 0"},
		{"list: huge limit", "GET", "/api/runs?limit=99999999999999999999", ``, 400, "from 1 to 1000"},
		{"list: limit just over", "GET", "/api/runs?limit=1001", ``, 400, "from 1 to 1000"},
		{"list: negative limit", "GET", "/api/runs?limit=-5", ``, 400, "from 1 to 1000"},
		{"list: cursor of no run", "GET", "/api/runs?cursor=" + strings.Repeat("f", 4096), ``, 400, "is not a run of this list"},
		{"list: cursor with SQL", "GET", "/api/runs?cursor=%27%20OR%201%3D1--", ``, 400, "is not a run of this list"},
		{"run: unknown id", "GET", "/api/runs/" + strings.Repeat("z", 4096), ``, 404, "zzz"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := call(t, h, tc.method, tc.path, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				if len(body) > 300 {
					body = body[:300] + "…"
				}
				t.Errorf("%s %s: HTTP %d, want %d with %q\n%s", tc.method, tc.path[:min(len(tc.path), 80)], code, tc.code, tc.want, body)
			}
		})
	}
	// The largest since and a Last-Event-ID past every event are a valid, empty stream.
	for _, hdr := range [][]string{nil, {"Last-Event-ID", "9223372036854775807"}, {"Last-Event-ID", "junk"}} {
		path := "/api/runs/" + id + "/events?since=9223372036854775807"
		if hdr != nil {
			path = "/api/runs/" + id + "/events"
		}
		code, body := call(t, h, "GET", path, "", hdr...)
		if code != 200 || (hdr == nil || hdr[1] != "junk") && body != "" {
			t.Errorf("GET %s %v: HTTP %d %q, want 200 and no events", path, hdr, code, body)
		}
	}
	if code, body := call(t, h, "GET", "/api/runs/"+id, ""); code != 200 || !strings.Contains(body, `"status":"completed"`) {
		t.Errorf("after the hostile requests the run reads HTTP %d %s", code, body)
	}
}
