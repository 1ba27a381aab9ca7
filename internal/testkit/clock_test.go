package testkit

import (
	"context"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestVirtualClockOrderAndStep(t *testing.T) {
	c := NewVirtualClock(t0)
	var got []string
	at := func(name string) func() {
		return func() { got = append(got, name+"@"+c.Now().Sub(t0).String()) }
	}
	c.AfterFunc(3*time.Second, at("c"))
	c.AfterFunc(time.Second, at("a"))
	stopped := c.AfterFunc(2*time.Second, at("stopped"))
	c.AfterFunc(time.Second, func() {
		at("b")()
		// Scheduled for the same instant from a callback: runs within the same step.
		c.AfterFunc(0, at("b2"))
	})
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop should report true once, then false")
	}
	if next, ok := c.Next(); !ok || !next.Equal(t0.Add(time.Second)) {
		t.Fatalf("Next = %v %v, want t0+1s", next, ok)
	}
	if !c.Step() {
		t.Fatal("Step found nothing")
	}
	if want := []string{"a@1s", "b@1s", "b2@1s"}; !slices.Equal(got, want) {
		t.Fatalf("after one step: %v, want %v", got, want)
	}
	if c.Pending() != 1 {
		t.Fatalf("Pending = %d, want 1", c.Pending())
	}
	if n := c.Advance(10 * time.Second); n != 1 {
		t.Fatalf("Advance fired %d, want 1", n)
	}
	if !c.Now().Equal(t0.Add(11 * time.Second)) {
		t.Fatalf("Now = %v, want t0+11s", c.Now())
	}
	if c.Step() {
		t.Fatal("Step with nothing pending should report false")
	}
	if want := []string{"a@1s", "b@1s", "b2@1s", "c@3s"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestVirtualClockAfterAndBlockUntil(t *testing.T) {
	c := NewVirtualClock(t0)
	got := make(chan time.Time, 1)
	go func() { got <- <-c.After(5 * time.Second) }()
	if err := c.BlockUntil(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	c.Step()
	if at := (<-got).Sub(t0); at != 5*time.Second {
		t.Fatalf("After(5s) sent t0+%v", at)
	}
	if got := c.Now().Sub(t0); got != 5*time.Second {
		t.Fatalf("slept until %v", got)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := c.BlockUntil(ctx, 99); err == nil {
		t.Fatal("BlockUntil ignored a cancelled context")
	}
}

func TestVirtualClockRunLimit(t *testing.T) {
	c := NewVirtualClock(t0)
	var tick func()
	n := 0
	tick = func() { n++; c.AfterFunc(time.Second, tick) }
	c.AfterFunc(time.Second, tick)
	if steps := c.Run(5); steps != 5 || n != 5 {
		t.Fatalf("Run(5) = %d steps, %d ticks", steps, n)
	}
}

func TestRealClock(t *testing.T) {
	var c Clock = RealClock{}
	done := make(chan struct{})
	c.AfterFunc(0, func() { close(done) })
	<-done
	<-c.After(0)
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
}

func TestScaledClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewScaledClock(start, 1000)
	before := c.Now()
	got := <-c.After(2 * time.Second) // 2 ms of wall time
	if d := got.Sub(before); d < 2*time.Second {
		t.Fatalf("After(2s) fired after %v of scaled time", d)
	}
	done := make(chan time.Time, 1)
	c.AfterFunc(3*time.Second, func() { done <- c.Now() })
	if d := (<-done).Sub(before); d < 3*time.Second {
		t.Fatalf("AfterFunc(3s) fired after %v", d)
	}
}
