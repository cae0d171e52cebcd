package qodengine

import (
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/config"
)

// BenchmarkStep is the engine's share of a sweep: one decision for one
// banded pool, in place, as the sweep calls it. A sweep over 100k pools
// costs 100k of these.
func BenchmarkStep(b *testing.B) {
	s := config.DefaultAutoscale()
	obs := make([]Observation, 1024)
	for i := range obs {
		obs[i] = Observation{Band: band.Band{Min: 2, Max: 8}, Writeonly: 1, Readonly: 1 + i%6, Demand: float64(i%40) / 4}
	}
	states := make([]State, len(obs))
	now := time.Unix(1_800_000_000, 0)
	var d Decision
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		j := i & 1023
		d = Step(&s, &states[j], &obs[j], now)
	}
	_ = d
}
