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
)

// ErrQueueFull is returned when a client's wait queue is full.
var ErrQueueFull = errors.New("the client's queue is full")

// Limiter is a FIFO semaphore: max permits (0 = unbounded), and at most
// maxQueue waiters beyond them.
type Limiter struct {
	mu       sync.Mutex
	max      int
	inUse    int
	maxQueue int
	queue    []chan struct{} // FIFO; a nil entry was abandoned
	queued   int
}

// NewLimiter returns a limiter of max permits with a queue of maxQueue.
func NewLimiter(max, maxQueue int) *Limiter { return &Limiter{max: max, maxQueue: maxQueue} }

// SetMax changes the permits (a client re-announced max_concurrent); waiters
// are let in if there is room now.
func (l *Limiter) SetMax(max int) {
	l.mu.Lock()
	l.max = max
	l.wakeLocked()
	l.mu.Unlock()
}

// InUse is the permits held now.
func (l *Limiter) InUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse
}

// Acquire takes a permit, waiting in line when none is free; it fails at
// once with ErrQueueFull when the line is full, or with ctx's error.
func (l *Limiter) Acquire(ctx context.Context) error {
	l.mu.Lock()
	if l.queued == 0 && (l.max == 0 || l.inUse < l.max) {
		l.inUse++
		l.mu.Unlock()
		return nil
	}
	if l.queued >= l.maxQueue {
		l.mu.Unlock()
		return ErrQueueFull
	}
	ch := make(chan struct{})
	l.queue = append(l.queue, ch)
	l.queued++
	idx := len(l.queue) - 1
	l.mu.Unlock()
	select {
	case <-ch:
		return nil // the permit was handed over by Release
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		select {
		case <-ch:
			// Handed over just as we gave up: pass it on.
			l.inUse--
			l.wakeLocked()
		default:
			for i := idx; i >= 0 && i < len(l.queue); i-- {
				if l.queue[i] == ch {
					l.queue[i] = nil
					l.queued--
					break
				}
			}
		}
		return ctx.Err()
	}
}

// Release returns a permit, handing it to the first in line.
func (l *Limiter) Release() {
	l.mu.Lock()
	l.inUse--
	l.wakeLocked()
	l.mu.Unlock()
}

func (l *Limiter) wakeLocked() {
	for len(l.queue) > 0 && (l.max == 0 || l.inUse < l.max) {
		ch := l.queue[0]
		l.queue[0] = nil
		l.queue = l.queue[1:]
		if ch == nil {
			continue
		}
		l.queued--
		l.inUse++
		close(ch)
	}
	if len(l.queue) == 0 {
		l.queue = nil
	}
}
