package testwait

import (
	"sync/atomic"
	"testing"
)

func TestForReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int64
	go func() {
		for range 1000 {
			n.Add(1)
		}
	}()
	For(t, "a thousand", func() bool { return n.Load() == 1000 })
	if n.Load() != 1000 {
		t.Fatalf("returned at %d", n.Load())
	}
}
