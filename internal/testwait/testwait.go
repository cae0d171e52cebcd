// Package testwait is for tests that wait on another goroutine's progress
// without sleeping: they yield until a condition holds, and fail (rather
// than hang) when it does not within a bound.
package testwait

import (
	"runtime"
	"testing"
	"time"
)

// Bound is how long For waits before it fails the test.
const Bound = 10 * time.Second

// For yields until cond holds, and fails the test if it has not within
// Bound; what names the awaited thing in that failure.
func For(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	within(tb, Bound, what, cond)
}

func within(tb testing.TB, bound time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", bound, what)
			return
		}
		runtime.Gosched()
	}
}
