package runtime

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// timeout_ms and --timeout run on Options.Clock: moving a virtual clock past them ends
// the call or the run at once, and nothing fires before.
func TestTimeoutsRunOnTheClock(t *testing.T) {
	for _, tt := range []struct {
		name    string
		src     string
		timeout time.Duration
		want    string // in the run's error, else its report
	}{
		{name: "timeout_ms", want: "timed_out", src: `function main()
  local r = agent{prompt = "long", timeout_ms = 60000}
  report(r.status)
end`},
		{name: "run timeout", timeout: time.Minute, want: ErrTimeout.Error(), src: `function main()
  agent{prompt = "long"}
end`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := &hangUntilCancelled{entered: make(chan struct{}, 1)}
			e := openResumeEnv(t, t.TempDir(), b, 0)
			clock := newVirtualClock()
			useClock(e.svc, clock)
			r := start(t, e.svc, tt.src, func(s *Spec) { s.Timeout = tt.timeout })
			<-b.entered
			clock.Advance(59 * time.Second)
			select {
			case <-r.Done():
				t.Fatalf("ended %v before its timeout", r.Wait())
			default:
			}
			clock.Advance(time.Second)
			select {
			case <-r.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("still running a minute into a one-minute timeout on the virtual clock")
			}
			res := r.Wait()
			got := fmt.Sprint(res.Report)
			if res.Err != nil {
				got = res.Err.Error()
			}
			if !strings.Contains(got, tt.want) {
				t.Fatalf("%s %v report %v, want %q", res.Status, res.Err, res.Report, tt.want)
			}
		})
	}
}
