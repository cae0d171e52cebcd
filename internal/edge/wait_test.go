package edge

import (
	"runtime"
	"testing"
	"time"
)

// waitFor yields until cond holds, and fails the test (instead of spinning
// forever) if it has not within ten seconds.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}
