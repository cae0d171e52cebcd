package testwait

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int64
	go func() {
		for range 1000 {
			n.Add(1)
		}
	}()
	For(t, "a thousand", func() bool { return n.Load() == 1000 })
}

// recorder is a testing.TB that keeps what Fatalf says.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

func TestAConditionThatNeverHoldsFailsTheTestByName(t *testing.T) {
	r := &recorder{TB: t}
	within(r, time.Millisecond, "the moon", func() bool { return false })
	if !strings.Contains(r.failed, "waiting for the moon") {
		t.Fatalf("failure said %q", r.failed)
	}
	r.failed = ""
	within(r, time.Millisecond, "nothing", func() bool { return true })
	if r.failed != "" {
		t.Fatalf("a holding condition failed: %q", r.failed)
	}
}
