package acp

import (
	"strings"
	"testing"

	"github.com/luft-run/luft/adapters"
	"github.com/luft-run/luft/agent"
	"github.com/luft-run/luft/internal/testkit/acpfake"
)

// fs/read_text_file of a file that does not exist answers ACP's -32002 (resource not
// found), which agents take to mean the file is new, not -32603 (internal error).
func TestReadMissingFileIsResourceNotFound(t *testing.T) {
	f := newFixture(t)
	res, err := run(t, f.backend(nil), agent.Request{Prompt: "READ new.txt"}, adapters.Call{})
	if err != nil || !strings.Contains(res.Text, "read new.txt: error") {
		t.Fatalf("%+v %v", res, err)
	}
	reads := f.find("fs/read_text_file", nil)
	if len(reads) != 1 || !strings.Contains(reads[0].Outcome, `"code":-32002`) || !strings.Contains(reads[0].Outcome, "Resource not found") {
		t.Fatalf("the agent got %+v, want a -32002 resource not found", reads)
	}
}

// A refused permission shows the same way whatever the agent does next: ending the
// prompt "cancelled" (codex) or ending its turn with no text (opencode, Claude Code) both
// fail the call with an error naming what was refused and why. An agent that goes on and
// answers keeps its result.
func TestRefusedPermissionIsVisible(t *testing.T) {
	for _, tc := range []struct {
		onReject string
		ok       bool
		want     string
	}{
		{onReject: "cancel", want: `and the agent stopped without finishing its turn (stop reason "cancelled")`},
		{onReject: "quiet", want: "and the agent ended its turn without an answer"},
		{onReject: "", ok: true, want: "run rm -rf /: rejected"},
	} {
		t.Run("on reject "+tc.onReject, func(t *testing.T) {
			f := newFixture(t, acpfake.EnvOnReject+"="+tc.onReject)
			b := f.backend(func(c *Config) { c.AllowCommands = []string{"go test"} })
			res, err := run(t, b, agent.Request{Prompt: "RUN rm -rf /"}, adapters.Call{})
			if err != nil {
				t.Fatal(err)
			}
			if perms := f.find("session/request_permission", nil); len(perms) != 1 || perms[0].Outcome != "reject_once" {
				t.Fatalf("permission entries %+v", perms)
			}
			if tc.ok {
				if !res.OK() || !strings.Contains(res.Text, tc.want) {
					t.Fatalf("%+v: want ok with %q", res, tc.want)
				}
				return
			}
			refused := `luft refused the agent permission for execute "` + "`rm -rf /`" + `" ("rm -rf /" does not start with an allowed command)`
			if res.Status != agent.StatusError || !strings.Contains(res.Error, refused) || !strings.Contains(res.Error, tc.want) {
				t.Fatalf("status %s, error %q\nwant status error naming %s and %q", res.Status, res.Error, refused, tc.want)
			}
		})
	}
}
