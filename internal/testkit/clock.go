package testkit

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// Clock is the engine's only source of time. RealClock follows the wall clock; a
// VirtualClock moves only when a driver advances it, so a benchmark can run hours of
// modelled traffic in milliseconds and get the same answer every time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once, d after now (at once for d <= 0). RealClock calls f on its
	// own goroutine; VirtualClock calls it from the goroutine that advances the clock.
	AfterFunc(d time.Duration, f func()) Timer
	// After sends the clock's time on the returned channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (RealClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// After wraps time.After.
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// VirtualClock is a manual clock for discrete-event simulation. Time stands still until
// the driver calls Step (jump to the next pending timer), AdvanceTo or Advance; due
// callbacks then run synchronously on the driver's goroutine, in order of due time and,
// for equal times, of scheduling. A callback may schedule further timers: one due at or
// before the target time runs within the same call. Nothing ever sleeps.
//
// It is safe for concurrent use; callbacks run without the clock's lock held.
type VirtualClock struct {
	mu     sync.Mutex
	cond   *sync.Cond // signalled when a timer is added; see BlockUntil
	now    time.Time
	timers vtimers
	seq    uint64
}

// NewVirtualClock returns a virtual clock reading start.
func NewVirtualClock(start time.Time) *VirtualClock {
	c := &VirtualClock{now: start}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now returns the virtual time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d.
func (c *VirtualClock) AfterFunc(d time.Duration, f func()) Timer {
	if d < 0 {
		d = 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &vtimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	c.cond.Broadcast()
	return t
}

// After returns a channel that receives the virtual time once d has passed.
func (c *VirtualClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	c.AfterFunc(d, func() { ch <- c.Now() })
	return ch
}

// Pending returns the number of timers not yet fired or stopped.
func (c *VirtualClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Next returns the due time of the earliest pending timer; false when none is pending.
func (c *VirtualClock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].at, true
}

// Step advances the clock to the earliest pending timer and fires every timer due at that
// instant, including those the callbacks schedule for it. It reports false, without
// moving the clock, when nothing is pending.
func (c *VirtualClock) Step() bool {
	at, ok := c.Next()
	if !ok {
		return false
	}
	c.AdvanceTo(at)
	return true
}

// Run steps until no timer is pending or maxSteps steps have run (0: no limit), and
// returns the number of steps. A simulation whose callbacks keep scheduling work forever
// needs the limit.
func (c *VirtualClock) Run(maxSteps int) int {
	n := 0
	for (maxSteps <= 0 || n < maxSteps) && c.Step() {
		n++
	}
	return n
}

// AdvanceTo fires, in order, every timer due at or before t, setting the clock to each
// timer's due time as it fires, then sets the clock to t (it never moves backwards). It
// returns the number of callbacks run.
func (c *VirtualClock) AdvanceTo(t time.Time) int {
	fired := 0
	for {
		c.mu.Lock()
		if len(c.timers) == 0 || c.timers[0].at.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return fired
		}
		tm := heap.Pop(&c.timers).(*vtimer)
		if tm.at.After(c.now) {
			c.now = tm.at
		}
		c.mu.Unlock()
		tm.f()
		fired++
	}
}

// Advance is AdvanceTo(Now().Add(d)).
func (c *VirtualClock) Advance(d time.Duration) int { return c.AdvanceTo(c.Now().Add(d)) }

// BlockUntil waits until at least n timers are pending or ctx ends. It lets a driver wait
// for goroutines (an HTTP handler, say) to register their timers before it steps.
func (c *VirtualClock) BlockUntil(ctx context.Context, n int) error {
	stop := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.cond.Wait()
	}
	return nil
}

type vtimer struct {
	c     *VirtualClock
	at    time.Time
	seq   uint64
	f     func()
	index int // position in the heap; -1 once fired or stopped
}

func (t *vtimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

type vtimers []*vtimer

func (h vtimers) Len() int { return len(h) }
func (h vtimers) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h vtimers) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *vtimers) Push(x any) {
	t := x.(*vtimer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *vtimers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}

// ScaledClock is the wall clock sped up by a factor: a benchmark of minutes of modelled
// rate-limit traffic runs in seconds, over real loopback HTTP and real goroutines. Give
// the engine and the client under test the same ScaledClock, so the durations in the
// engine's headers (engine time) mean the same to both.
type ScaledClock struct {
	factor float64
	base   time.Time // wall time at creation
	start  time.Time // the clock's time at creation
}

// NewScaledClock returns a clock that starts at start and runs factor times faster than
// the wall clock (factor ≥ 1).
func NewScaledClock(start time.Time, factor float64) *ScaledClock {
	return &ScaledClock{factor: max(1, factor), base: time.Now(), start: start}
}

// Now returns the scaled time.
func (c *ScaledClock) Now() time.Time {
	return c.start.Add(time.Duration(float64(time.Since(c.base)) * c.factor))
}

// AfterFunc calls f once d of scaled time has passed.
func (c *ScaledClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(c.wall(d), f)
}

// After sends the scaled time once d of it has passed.
func (c *ScaledClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	time.AfterFunc(c.wall(d), func() { ch <- c.Now() })
	return ch
}

// wall converts a span of scaled time to wall time.
func (c *ScaledClock) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.factor)
}
