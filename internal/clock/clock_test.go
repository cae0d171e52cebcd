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
