package host

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/luft-run/luft/internal/pgtest"
	"github.com/luft-run/luft/scheduler"
	"github.com/luft-run/luft/storage"
)

// reqBucket is a provider key's continuous request bucket, as OpenAI reports it: limit
// requests, refilled at rate per second, a request refused with 429 when none is left.
type reqBucket struct {
	mu          sync.Mutex
	limit, rate float64
	level       float64
	at          time.Time
	ok, refused int
	firstOK     time.Time // the first request the bucket's burst could not have covered
	lastOK      time.Time
	burstLeft   float64
}

// send takes one request and returns its status and rate-limit headers.
func (b *reqBucket) send(now time.Time) (int, http.Header) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.level = min(b.limit, b.level+b.rate*now.Sub(b.at).Seconds())
	b.at = now
	status := http.StatusOK
	if b.level >= 1 {
		b.level--
		b.ok++
		b.lastOK = now
		if b.burstLeft--; b.burstLeft == 0 {
			b.firstOK = now
		}
	} else {
		b.refused++
		status = http.StatusTooManyRequests
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(int(b.limit)))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(b.level)))
	h.Set("x-ratelimit-reset-requests", fmt.Sprintf("%dms", int((b.limit-b.level)/b.rate*1000+0.999)))
	return status, h
}

// Three nodes sharing one tight key through PostgreSQL (each with its own store, as
// three daemons) together send close to the key's rate once its burst is spent, and meet
// no 429. The key refills its 300 requests in 10 s, six times faster than a limit per
// minute: the shared level must refill at the rate the nodes learn from the headers
// (it refilled at limit/60 while the daemon's adapter dropped the learned rates, and
// three nodes got 17% of the key).
func TestSharedBudgetThreeNodesReachTheKeyRate(t *testing.T) {
	url := pgtest.URL(t)
	const limit, rate, perNode = 300.0, 30.0, 12
	const target = limit + 8*rate // 8 s of the key's rate after its burst
	b := &reqBucket{limit: limit, rate: rate, level: limit, at: time.Now(), burstLeft: limit}
	// A deadline, so a slow budget fails in bounded time: twice the time the key needs.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Duration((target-limit)/rate)*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for n := range 3 {
		p, err := storage.OpenPostgres(t.Context(), url, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		e := scheduler.NewExecutor(scheduler.Config{DefaultLane: scheduler.LaneConfig{Slots: perNode}}, nil)
		e.Share(scheduler.SharedConfig{Budget: sharedBudget{st: p, node: fmt.Sprintf("n%d", n)}, Key: func(string) string { return "key" }})
		for w := range perNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					pm, err := e.Admit(ctx, scheduler.Turn{RunID: fmt.Sprintf("n%d-w%d", n, w), CallKey: strconv.Itoa(i), Lane: "l", EstTokens: 10})
					for err == nil && pm != nil {
						if s, ok := pm.(interface{ Sent() }); ok {
							s.Sent()
						}
						status, h := b.send(time.Now())
						b.mu.Lock()
						done := b.ok >= target
						b.mu.Unlock()
						if done {
							cancel()
						}
						pm, err = scheduler.Finish(ctx, pm, scheduler.Outcome{Header: h, StatusCode: status})
					}
				}
			}()
		}
	}
	wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ok <= int(limit)+1 {
		t.Fatalf("3 nodes sent %d requests, %d × 429: none after the key's burst of %.0f", b.ok, b.refused, limit)
	}
	got := float64(b.ok-int(limit)) / b.lastOK.Sub(b.firstOK).Seconds()
	t.Logf("3 nodes: %d requests, %d × 429; after the burst %.1f requests/s of the key's %.0f (%.0f%%)",
		b.ok, b.refused, got, rate, 100*got/rate)
	if b.refused > 0 {
		t.Errorf("the key answered %d × 429", b.refused)
	}
	if got < 0.85*rate {
		t.Errorf("3 nodes sent %.1f requests/s after the burst, want ≥ 85%% of the key's %.0f/s", got, rate)
	}
}
