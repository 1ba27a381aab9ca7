package scheduler

import "time"

// Clock is the Executor's source of time: the decision core's now and the timer that
// wakes it at NextWake. RealClock is the default; tests inject a clock they advance.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f, on a goroutine of its own or on the goroutine that advances
	// the clock, once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not started; it reports whether it did.
	Stop() bool
}

// RealClock returns the wall clock.
func RealClock() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
