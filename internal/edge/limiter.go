// Package edge is the Aperio edge: it proxies requests by Host to the
// clients registered for that hostname, under each client's concurrency
// limit, and holds requests for a hostname with no routable client until one
// comes up (cold start). The permits in use are the live inflight the hook
// loop reads.
package edge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// ErrQueueFull is returned when a client's wait queue is full.
var ErrQueueFull = errors.New("the client's queue is full")

// Limiter is a FIFO semaphore: max permits (0 = unbounded), and at most
// maxQueue waiters beyond them. Taking and returning a permit while nobody
// waits is one atomic operation; the line is kept under a mutex.
type Limiter struct {
	inUse  atomic.Int64
	max    atomic.Int64
	queued atomic.Int64

	mu       sync.Mutex
	maxQueue int
	queue    []chan struct{} // FIFO; a nil entry was abandoned
}

// NewLimiter returns a limiter of max permits with a queue of maxQueue.
func NewLimiter(max, maxQueue int) *Limiter {
	l := &Limiter{maxQueue: maxQueue}
	l.max.Store(int64(max))
	return l
}

// SetMax changes the permits (a client re-announced max_concurrent); waiters
// are let in if there is room now.
func (l *Limiter) SetMax(max int) {
	l.max.Store(int64(max))
	l.mu.Lock()
	l.wakeLocked()
	l.mu.Unlock()
}

// InUse is the permits held now.
func (l *Limiter) InUse() int { return int(l.inUse.Load()) }

// take takes a permit if one is free.
func (l *Limiter) take() bool {
	for {
		cur, m := l.inUse.Load(), l.max.Load()
		if m != 0 && cur >= m {
			return false
		}
		if l.inUse.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// Acquire takes a permit, waiting in line when none is free; it fails at
// once with ErrQueueFull when the line is full, or with ctx's error.
func (l *Limiter) Acquire(ctx context.Context) error {
	if l.queued.Load() == 0 && l.take() {
		return nil
	}
	l.mu.Lock()
	if l.queued.Load() == 0 && l.take() {
		l.mu.Unlock()
		return nil
	}
	if int(l.queued.Load()) >= l.maxQueue {
		l.mu.Unlock()
		return ErrQueueFull
	}
	ch := make(chan struct{})
	l.queue = append(l.queue, ch)
	l.queued.Add(1)
	// A permit returned between the failed take and joining the line saw
	// nobody waiting: look again now that we are in it.
	l.wakeLocked()
	idx := len(l.queue) - 1
	l.mu.Unlock()
	select {
	case <-ch:
		return nil // the permit was handed over
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		select {
		case <-ch:
			// Handed over just as we gave up: pass it on.
			l.inUse.Add(-1)
			l.wakeLocked()
		default:
			for i := min(idx, len(l.queue)-1); i >= 0; i-- {
				if l.queue[i] == ch {
					l.queue[i] = nil
					l.queued.Add(-1)
					break
				}
			}
		}
		return ctx.Err()
	}
}

// Release returns a permit, handing it to the first in line.
func (l *Limiter) Release() {
	l.inUse.Add(-1)
	if l.queued.Load() > 0 {
		l.mu.Lock()
		l.wakeLocked()
		l.mu.Unlock()
	}
}

// wakeLocked hands free permits to the waiters at the head of the line.
func (l *Limiter) wakeLocked() {
	for len(l.queue) > 0 {
		ch := l.queue[0]
		if ch == nil {
			l.queue[0] = nil
			l.queue = l.queue[1:]
			continue
		}
		if !l.take() {
			break
		}
		l.queue[0] = nil
		l.queue = l.queue[1:]
		l.queued.Add(-1)
		close(ch)
	}
	if len(l.queue) == 0 {
		l.queue = nil
	}
}
