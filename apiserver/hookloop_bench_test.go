package apiserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/edge"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/hookengine"
	"github.com/qodaperio/autoscale/internal/store"
)

// BenchmarkHookTick10kRecords is one pass of the hook loop over 10k armed
// records whose pools sit between the thresholds (run with -cpu 1): the
// per-tick cost of the loop once its records are loaded.
func BenchmarkHookTick10kRecords(b *testing.B) {
	a := config.DefaultAperio()
	a.Scaling = true
	s := New(Deps{Aperio: a})
	now := time.Unix(1_800_000_000, 0)
	for i := range 10_000 {
		host := fmt.Sprintf("app%d.example.com", i)
		max := 8
		d := hook.Declaration{Hostname: host, URL: "https://hooks.example.com/scale", Max: &max}
		h, err := d.Validate()
		if err != nil {
			b.Fatal(err)
		}
		lr := &loopRecord{rec: store.ScalingRecord{ID: fmt.Sprintf("sh_%d", i), Hostname: host, Declaration: d},
			hook: h, valid: true, state: hookengine.State{Armed: true}, util: -1}
		s.hooks.records = append(s.hooks.records, lr)
		s.hooks.byID[lr.rec.ID] = lr
		for c := range 2 { // two clients at 50%: neither clock runs
			s.pools.Heartbeat(host, fmt.Sprint(c), edge.ClientInfo{MaxConcurrent: 10, State: ClientActive, Inflight: 5, ProbeOK: true}, edge.HostSettings{}, now)
		}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		s.hookPass(ctx, now.Add(time.Duration(i%20)*time.Second))
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/tick")
}
