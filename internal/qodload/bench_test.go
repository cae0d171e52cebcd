package qodload

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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

// start gives each RunParallel goroutine its own place in the pool sequence,
// as real traffic would: goroutines that walk the same pools in lockstep
// measure contention on one pool's lock, not the lookup.
var start atomic.Int64

// seeded is a recorder that has seen every one of ks.
func seeded(ks []pool.Key, now time.Time) *Recorder {
	r := NewRecorder()
	for _, k := range ks {
		r.Record(k, 1, now)
	}
	return r
}

func benchRecord(b *testing.B, pools int) {
	ks := keys(pools)
	now := time.Unix(1_800_000_000, 0)
	r := seeded(ks, now)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(1)) * 1_000_003
		for pb.Next() {
			r.Record(ks[i%pools], 12, now)
			i += 7919 // a prime stride: spread over the pools like real traffic
		}
	})
}

// BenchmarkRecord{1k,100k}Pools look each key up in a slice of stored keys,
// so at 100k pools they also pay the cache misses of reading the caller's
// key from cold memory.
func BenchmarkRecord1kPools(b *testing.B)   { benchRecord(b, 1_000) }
func BenchmarkRecord100kPools(b *testing.B) { benchRecord(b, 100_000) }

// benchRecordParsed models the load endpoint: the key's bytes were just
// decoded from a request into a buffer, so they are hot and their strings
// point into that buffer, not at the recorder's copy.
func benchRecordParsed(b *testing.B, pools int) {
	now := time.Unix(1_800_000_000, 0)
	r := seeded(keys(pools), now)
	tenants := make([]string, 97)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant%d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(start.Add(1)) * 1_000_003
		buf := make([]byte, 0, 64)
		for pb.Next() {
			n := i % pools
			buf = strconv.AppendInt(append(buf[:0], "pool"...), int64(n), 10)
			k := pool.Key{Tenant: tenants[n%97], TenantDB: "db", Pool: unsafe.String(&buf[0], len(buf))}
			r.Record(k, 12, now)
			i += 7919
		}
	})
}

func BenchmarkRecordParsed1kPools(b *testing.B)   { benchRecordParsed(b, 1_000) }
func BenchmarkRecordParsed100kPools(b *testing.B) { benchRecordParsed(b, 100_000) }

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
		i := int(start.Add(1)) * 1_000_003
		for pb.Next() {
			hs[i%len(hs)].Record(12, minute)
			i += 7919
		}
	})
}
