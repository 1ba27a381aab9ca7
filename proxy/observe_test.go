package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/luft-run/luft/internal/testkit"
	"github.com/luft-run/luft/scheduler"
)

// observeCount wraps the scheduler's permits and counts the early readings (Observe)
// the proxy hands them.
type observeCount struct {
	s scheduler.Scheduler
	n atomic.Int32
}

func (c *observeCount) Admit(ctx context.Context, t scheduler.Turn) (scheduler.Permit, error) {
	p, err := c.s.Admit(ctx, t)
	if err != nil {
		return nil, err
	}
	return &countedPermit{p: p, n: &c.n}, nil
}

type countedPermit struct {
	p scheduler.Permit
	n *atomic.Int32
}

func (c *countedPermit) Done(o scheduler.Outcome) { c.p.Done(o) }
func (c *countedPermit) Observe(h http.Header) {
	c.n.Add(1)
	if o, ok := c.p.(scheduler.Observer); ok {
		o.Observe(h)
	}
}

// A stream's headers come long before its end and reach the scheduler as an early
// reading; a whole answer's headers come with the answer, already counting its
// completion, and are read only when the turn ends (read early too, the completion a
// provider billed before writing them was counted twice).
func TestObserveOnlyStreams(t *testing.T) {
	e := testkit.NewEngine(testkit.Config{Models: []string{"m"},
		Limits: testkit.Limits{TPM: 100_000, RPM: 1000, OutputAtEnd: true}})
	up := httptest.NewServer(testkit.NewServer(e).Handler())
	t.Cleanup(up.Close)
	c := &observeCount{s: scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: 2}}, nil)}
	p, err := New(Options{Upstreams: []Upstream{{Name: "fake", BaseURL: up.URL + "/v1", Model: "m"}}, Scheduler: c})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(func() { front.Close(); p.Close() })

	for _, tc := range []struct {
		body string
		want int32
	}{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 0},
		{`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`, 1},
	} {
		c.n.Store(0)
		resp, _ := postChat(t, front.URL, tc.body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d", tc.body, resp.StatusCode)
		}
		if got := c.n.Load(); got != tc.want {
			t.Errorf("%s: %d early readings, want %d", tc.body, got, tc.want)
		}
	}
}
