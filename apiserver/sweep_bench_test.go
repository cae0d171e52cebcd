package apiserver

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/store/sqlite"
)

// Benchmarks of the sweep over a fleet of 100k banded pools (run with
// -benchmem -cpu 1,2). The load puts every pool between the watermarks
// (utilization 0.5), the steady state of a healthy fleet, unless a benchmark
// says otherwise.

const fleet = 100_000

var benchNow = time.Unix(1_800_000_000/60*60, 0)

func fleetKey(i int) pool.Key {
	return pool.Key{Tenant: fmt.Sprintf("t%d", i%100), TenantDB: "db", Pool: fmt.Sprintf("p%d", i)}
}

// BenchmarkDecisionPass100kPools is the in-memory part of a sweep: the
// engine over every pool of the view the store returned.
func BenchmarkDecisionPass100kPools(b *testing.B) {
	settings := config.DefaultAutoscale()
	view := make([]store.SweepRow, fleet)
	for i := range view {
		view[i] = store.SweepRow{Key: fleetKey(i), Roles: pool.Roles{Writeonly: 1, Readonly: 1 + i%4},
			Band: band.Band{Min: 2, Max: 8}, StatementMs: int64(i%50) * 20_000}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		out, _ := decide(&settings, view, nil, benchNow)
		if len(out) != fleet {
			b.Fatal("short pass")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/pass")
}

// fleetServer is a server over a SQLite file holding the fleet, with five
// minutes of load per pool in the window.
func fleetServer(b *testing.B, settings config.Autoscale) *Server {
	b.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "fleet.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	var rows []store.LoadRow
	first, last := qodengine.Window(benchNow, settings.WindowMinutes)
	err = st.Mutate(ctx, func(tx store.Tx) error {
		for i := range fleet {
			p := &pool.Pool{Key: fleetKey(i), Roles: pool.Roles{Writeonly: 1, Readonly: 1}, Band: &band.Band{Min: 2, Max: 8}}
			if err := tx.InsertPool(p, benchNow); err != nil {
				return err
			}
			// Capacity 4 (one reader at the assumed 4): demand 2 is 0.5.
			for m := first; m <= last; m++ {
				rows = append(rows, store.LoadRow{Key: p.Key, Minute: m, StatementMs: 2 * 60_000, Statements: 10})
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := st.FlushLoad(ctx, rows); err != nil {
		b.Fatal(err)
	}
	return New(Deps{Store: st, Autoscale: settings, Now: func() time.Time { return benchNow }})
}

func benchSweep(b *testing.B, settings config.Autoscale, wantChanged bool) {
	s := fleetServer(b, settings)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rep := s.Sweep(ctx, benchNow)
		if rep.Err != nil || rep.Pools != fleet || rep.Actions != 0 {
			b.Fatalf("sweep: %+v", rep)
		}
	}
	b.StopTimer()
	st, _ := s.store.AutoscaleState(ctx, fleetKey(7))
	if (st.Version > 0) != wantChanged {
		b.Fatalf("pool state version %d after the sweeps", st.Version)
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/sweep")
}

// BenchmarkSweep100kPools is a whole sweep: flush, purge, the window read
// from SQLite, the decision pass, and saving what changed (nothing, in the
// steady state).
func BenchmarkSweep100kPools(b *testing.B) {
	benchSweep(b, config.DefaultAutoscale(), false)
}

// BenchmarkSweep100kPoolsAllStreaking: every pool is busy and its out
// streak grows each sweep (outStreak is set out of reach), so the sweep
// also writes 100k states.
func BenchmarkSweep100kPoolsAllStreaking(b *testing.B) {
	settings := config.DefaultAutoscale()
	settings.HighWatermark, settings.LowWatermark = 0.4, 0.1
	settings.OutStreak = 1000
	benchSweep(b, settings, true)
}
