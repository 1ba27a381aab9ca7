package scheduler

import (
	"context"
	"errors"
	"sync"
	"testing"
)

func TestGateBoundsConcurrency(t *testing.T) {
	const slots, turns = 3, 50
	g := NewGate(slots)
	var mu sync.Mutex
	running, peak := 0, 0
	var wg sync.WaitGroup
	release := make(chan struct{})
	admitted := make(chan struct{}, turns)
	for range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := g.Admit(context.Background(), Turn{CallKey: "k"})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			admitted <- struct{}{}
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			p.Done(Outcome{})
		}()
	}
	// Exactly `slots` turns get in before anything is released.
	for range slots {
		<-admitted
	}
	if s := g.Stats(); s.Running != slots {
		t.Fatalf("running = %d, want %d", s.Running, slots)
	}
	close(release)
	wg.Wait()
	if peak > slots {
		t.Fatalf("peak concurrency %d > %d slots", peak, slots)
	}
	if s := g.Stats(); s.Admitted != turns || s.Running != 0 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestGateAdmitHonoursCancel(t *testing.T) {
	g := NewGate(1)
	p, err := g.Admit(context.Background(), Turn{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Admit(ctx, Turn{CallKey: "main/2"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	p.Done(Outcome{})
	p.Done(Outcome{}) // a second Done is harmless
	if _, err := g.Admit(context.Background(), Turn{}); err != nil {
		t.Fatalf("slot not returned: %v", err)
	}
}
