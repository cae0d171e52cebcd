// Package clock is the time source of the server's loops. Loops take a Clock
// so that tests drive them with a Fake one instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time and wakes a waiter after a duration.
type Clock interface {
	Now() time.Time
	// After delivers the time on the channel once d has passed.
	After(d time.Duration) <-chan time.Time
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a clock that moves only when told to.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
	// waiting is signalled whenever a new waiter registers.
	waiting chan struct{}
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a fake clock standing at start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, waiting: make(chan struct{}, 1)}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	select {
	case f.waiting <- struct{}{}:
	default:
	}
	return ch
}

// Advance moves the clock by d and wakes every waiter that is due, each with
// the time it was due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(f.now) {
			w.ch <- w.at // the instant it was due, as a timer reports it
		} else {
			kept = append(kept, w)
		}
	}
	f.waiters = kept
}

// Waiters is how many After calls are still waiting.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// Waiting is signalled when a waiter registers, so a test can wait for a loop
// to go back to sleep before moving the clock again.
func (f *Fake) Waiting() <-chan struct{} { return f.waiting }
