package clock

import (
	"testing"
	"time"
)

func TestFakeWakesOnlyDueWaiters(t *testing.T) {
	f := NewFake(time.Unix(1000, 0))
	a, b := f.After(30*time.Second), f.After(60*time.Second)
	f.Advance(29 * time.Second)
	select {
	case <-a:
		t.Fatal("woke before its time")
	default:
	}
	f.Advance(time.Second)
	if got := <-a; !got.Equal(time.Unix(1030, 0)) {
		t.Fatalf("woke at %v", got)
	}
	select {
	case <-b:
		t.Fatal("the later waiter woke early")
	default:
	}
	if f.Waiters() != 1 {
		t.Fatalf("%d waiters left, want 1", f.Waiters())
	}
	f.Advance(time.Hour)
	if got := <-b; !got.Equal(time.Unix(1060, 0)) {
		t.Fatalf("a late wake reports %v, want the instant it was due", got)
	}
	if c := f.After(0); len(c) != 1 {
		t.Fatal("After(0) did not fire at once")
	}
}

func TestFakeAfterFuncRunsOnceUnlessStopped(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	ran := make(chan string, 2)
	f.AfterFunc(time.Second, func() { ran <- "first" })
	stop := f.AfterFunc(time.Second, func() { ran <- "stopped" })
	if !stop() {
		t.Fatal("stop of a waiting call reported false")
	}
	f.Advance(999 * time.Millisecond)
	select {
	case got := <-ran:
		t.Fatalf("%s ran early", got)
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-ran; got != "first" {
		t.Fatalf("ran %s", got)
	}
	if stop() {
		t.Fatal("stopping twice reported true")
	}
	f.Advance(time.Hour)
	select {
	case got := <-ran:
		t.Fatalf("%s ran after stop", got)
	default:
	}
}

func TestTimerResetReplacesTheEarlierArming(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	fired := make(chan time.Time, 4)
	tm := NewTimer(f, func() { fired <- f.Now() })
	if tm.Stop() {
		t.Fatal("a new timer is stopped: Stop reported true")
	}
	tm.Reset(time.Second)
	tm.Reset(3 * time.Second) // the first arming is gone
	f.Advance(2 * time.Second)
	select {
	case <-fired:
		t.Fatal("fired at the replaced arming")
	default:
	}
	f.Advance(time.Second)
	if got := <-fired; !got.Equal(time.Unix(3, 0)) {
		t.Fatalf("fired at %v", got)
	}
	tm.Reset(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	f.Advance(time.Hour)
	select {
	case <-fired:
		t.Fatal("fired after Stop")
	default:
	}
	if f.Waiters() != 0 {
		t.Fatalf("%d waiters left", f.Waiters())
	}
}

func TestTimerOnTheRealClockIsOneTimer(t *testing.T) {
	fired := make(chan struct{}, 4)
	tm := NewTimer(Real{}, func() { fired <- struct{}{} })
	tm.Reset(time.Hour)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported false")
	}
	tm.Reset(time.Microsecond)
	<-fired // fires after a Reset that follows a Stop
	if tm.Stop() {
		t.Fatal("Stop after the call reported true")
	}
	if n := testing.AllocsPerRun(100, func() { tm.Reset(time.Hour); tm.Stop() }); n != 0 {
		t.Fatalf("Reset and Stop allocate %v times", n)
	}
}
