package suggest

import "testing"

func TestNearest(t *testing.T) {
	cmds := []string{"start", "stop", "status"}
	for _, c := range []struct {
		name  string
		known []string
		want  string
	}{
		{"strat", cmds, "start"},   // two letters swapped
		{"stpo", cmds, "stop"},     // short: one swap
		{"stauts", cmds, "status"}, // swap
		{"lsit", []string{"list", "probe"}, "list"},
		{"srve", []string{"serve"}, "serve"},
		{"workflw", []string{"workflow", "resume"}, "workflow"},
		{"promt", []string{"prompt", "model", "tools"}, "prompt"},
		{"PROMT", []string{"prompt"}, "prompt"},
		{"xyz", cmds, ""},
		{"banana", cmds, ""},
		{"sto", []string{"stop", "sta"}, "stop"}, // tie: the first listed
	} {
		if got := Nearest(c.name, c.known); got != c.want {
			t.Errorf("Nearest(%q, %v) = %q, want %q", c.name, c.known, got, c.want)
		}
	}
}
