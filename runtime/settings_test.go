package runtime

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/luft-run/luft/lua"
)

// Start settings repeated on a resume: the run's own value passes, any other is refused
// naming the run's value.
func TestSameSettings(t *testing.T) {
	started := Spec{Path: "flow.lua", Args: map[string]any{"n": 1.0}, Backend: "mock", Timeout: time.Minute,
		Limits: lua.Limits{MaxAgentCalls: 50}}
	for _, c := range []struct {
		given map[string]string
		want  string // "" = accepted
	}{
		{map[string]string{"backend": "mock", "timeout": "60s", "max-agent-calls": "50", "class": "interactive"}, ""},
		{map[string]string{"workflow": "./flow.lua", "args": `{ "n": 1 }`}, ""},
		{map[string]string{"backend": "openai"}, "--backend openai differs from the run's mock"},
		{map[string]string{"model": "m"}, "--model m: the run was started without --model"},
		{map[string]string{"timeout": "1s"}, "--timeout 1s differs from the run's 1m0s"},
		{map[string]string{"class": "batch"}, "--class batch differs from the run's interactive"},
		{map[string]string{"max-agent-calls": "5"}, "--max-agent-calls 5 differs from the run's 50"},
		{map[string]string{"workflow": "other.lua"}, "--workflow other.lua differs from the run's flow.lua"},
		{map[string]string{"args": `{"n": 2}`}, `--args {"n": 2} differs from the run's {"n":1}`},
	} {
		err := sameSettings(started, c.given)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: refused: %v", c.given, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrSettingChanged)):
			t.Errorf("%v: got %v, want an ErrSettingChanged saying %q", c.given, err, c.want)
		}
	}
}
