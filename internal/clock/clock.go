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
	// AfterFunc calls f in its own goroutine once d has passed, unless
	// stop is called first; stop reports whether it prevented the call.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Real is the wall clock.
type Real struct{}

func (Real) Now() time.Time                         { return time.Now() }
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (Real) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

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
	fn *func() // AfterFunc's; its address identifies it for stop
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

// AfterFunc calls fn in its own goroutine once the clock has moved d on.
func (f *Fake) AfterFunc(d time.Duration, fn func()) func() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := &fn
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), fn: p})
	select {
	case f.waiting <- struct{}{}:
	default:
	}
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, w := range f.waiters {
			if w.fn == p {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				return true
			}
		}
		return false
	}
}

// Advance moves the clock by d and wakes every waiter that is due, each with
// the time it was due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		switch {
		case w.at.After(f.now):
			kept = append(kept, w)
		case w.fn != nil:
			go (*w.fn)()
		default:
			w.ch <- w.at // the instant it was due, as a timer reports it
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

// Timer calls f once d after each Reset, unless stopped first. On the real
// clock it is one time.Timer for its whole life, so a server can arm one per
// request without allocating; on any other clock each Reset is an AfterFunc.
// It is for one owner: Reset and Stop are not safe to call concurrently.
type Timer struct {
	c    Clock
	f    func()
	real *time.Timer
	stop func() bool
}

// NewTimer returns a stopped Timer that will call f on c.
func NewTimer(c Clock, f func()) *Timer {
	t := &Timer{c: c, f: f}
	if _, ok := c.(Real); ok {
		t.real = time.AfterFunc(time.Hour, f)
		t.real.Stop()
	}
	return t
}

// Reset arms the timer to fire d from now, replacing any earlier arming.
func (t *Timer) Reset(d time.Duration) {
	if t.real != nil {
		t.real.Reset(d)
		return
	}
	t.Stop()
	t.stop = t.c.AfterFunc(d, t.f)
}

// Stop disarms the timer and reports whether that prevented a call.
func (t *Timer) Stop() bool {
	if t.real != nil {
		return t.real.Stop()
	}
	if t.stop == nil {
		return false
	}
	stop := t.stop
	t.stop = nil
	return stop()
}
