package edge

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// waitQueued yields until n waiters stand in line.
func waitQueued(l *Limiter, n int) {
	for {
		if int(l.queued.Load()) == n {
			return
		}
		runtime.Gosched()
	}
}

func TestLimiterIsFIFOAndBounded(t *testing.T) {
	l := NewLimiter(1, 2)
	ctx := context.Background()
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	order := make(chan int, 2)
	for i := range 2 {
		go func() {
			if err := l.Acquire(ctx); err != nil {
				t.Error(err)
			}
			order <- i
		}()
		waitQueued(l, i+1) // the first is in line before the second
	}
	if err := l.Acquire(ctx); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a third waiter: %v, want ErrQueueFull", err)
	}
	l.Release()
	first := <-order
	l.Release()
	second := <-order
	if first != 0 || second != 1 || l.InUse() != 1 {
		t.Fatalf("order %d, %d; in use %d", first, second, l.InUse())
	}
}

func TestAbandonedWaiterLeavesTheLine(t *testing.T) {
	l := NewLimiter(1, 1)
	l.Acquire(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- l.Acquire(ctx) }()
	waitQueued(l, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The place in line is free again, and the permit goes to no ghost.
	l.Release()
	if l.InUse() != 0 {
		t.Fatalf("in use %d after the only holder released", l.InUse())
	}
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestUnboundedLimiterNeverQueues(t *testing.T) {
	l := NewLimiter(0, 0)
	for range 1000 {
		if err := l.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if l.InUse() != 1000 {
		t.Fatalf("in use %d", l.InUse())
	}
}

func TestRaisingTheLimitLetsWaitersIn(t *testing.T) {
	l := NewLimiter(1, 5)
	l.Acquire(context.Background())
	got := make(chan struct{}, 2)
	for range 2 {
		go func() { l.Acquire(context.Background()); got <- struct{}{} }()
	}
	waitQueued(l, 2)
	l.SetMax(3)
	<-got
	<-got
	if l.InUse() != 3 {
		t.Fatalf("in use %d", l.InUse())
	}
}

// Many takers at once: never more than max permits out, nobody left in
// line, every taker served (run under -race by make test).
func TestLimiterUnderContention(t *testing.T) {
	l := NewLimiter(3, 1000)
	var out, peak atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				if err := l.Acquire(context.Background()); err != nil {
					t.Error(err)
					return
				}
				n := out.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				runtime.Gosched()
				out.Add(-1)
				l.Release()
			}
		}()
	}
	wg.Wait()
	if peak.Load() > 3 || l.InUse() != 0 || l.queued.Load() != 0 {
		t.Fatalf("peak %d, in use %d, queued %d", peak.Load(), l.InUse(), l.queued.Load())
	}
}
