package qodload

import (
	"fmt"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/pool"
)

// Benchmarks of the hot path, recording one statement (run with
// -cpu 1,2 -benchmem). Keys are built before the timer: a caller has them
// from its request already.

func keys(n int) []pool.Key {
	ks := make([]pool.Key, n)
	for i := range ks {
		ks[i] = pool.Key{Tenant: fmt.Sprintf("tenant%d", i%97), TenantDB: "db", Pool: fmt.Sprintf("pool%d", i)}
	}
	return ks
}

func benchRecord(b *testing.B, pools int) {
	r := NewRecorder()
	ks := keys(pools)
	now := time.Unix(1_800_000_000, 0)
	for _, k := range ks {
		r.Record(k, 1, now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r.Record(ks[i%pools], 12, now)
			i += 7919 // a prime stride: spread over the pools like real traffic
		}
	})
}

func BenchmarkRecord1kPools(b *testing.B)   { benchRecord(b, 1_000) }
func BenchmarkRecord100kPools(b *testing.B) { benchRecord(b, 100_000) }

// BenchmarkRecordHandle is a caller that kept the pool's handle from routing.
func BenchmarkRecordHandle(b *testing.B) {
	r := NewRecorder()
	ks := keys(1000)
	hs := make([]*Handle, len(ks))
	for i, k := range ks {
		hs[i] = r.Handle(k)
	}
	minute := int64(1_800_000_000 / 60)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			hs[i%len(hs)].Record(12, minute)
			i += 7919
		}
	})
}
