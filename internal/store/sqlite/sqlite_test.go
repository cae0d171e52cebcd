package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMigrationsApplyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s := open(t, path)
	s.Close()
	s = open(t, path) // reopening applies nothing twice
	defer s.Close()
	v, err := s.SchemaVersion(context.Background())
	if err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v; want %d", v, err, len(migrations))
	}
}

func TestRefusesANewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "n.db")
	s := open(t, path)
	if _, err := s.db.Exec(`INSERT INTO schema_migrations VALUES (?, 0)`, len(migrations)+1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := Open(context.Background(), path); err == nil {
		t.Fatal("opened a database from a newer server")
	}
}

func TestPoolRoundTripAndConditionalUpdate(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000)
	p := &pool.Pool{Key: pool.Key{Tenant: "acme", TenantDB: "db", Pool: "bi"}, Roles: pool.Roles{Writeonly: 1, Readonly: 2},
		MaxConcurrentPerNode: 8, Band: &band.Band{Min: 2, Max: 6}, Cohorts: []pool.Cohort{{Name: "etl", Nodes: 1}}}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.InsertPool(p, now) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.InsertPool(p, now) }); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate insert: %v", err)
	}
	got, err := s.GetPool(ctx, p.Key)
	if err != nil || got.Roles != p.Roles || *got.Band != *p.Band || got.Cohorts[0] != p.Cohorts[0] || got.Version != 1 || !got.CreatedAt.Equal(now) {
		t.Fatalf("read back %+v, %v", got, err)
	}
	stale := *got
	got.Band = nil
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.UpdatePool(got, now) }); err != nil || got.Version != 2 {
		t.Fatalf("update: %v, version %d", err, got.Version)
	}
	// A writer holding the old version loses instead of overwriting.
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.UpdatePool(&stale, now) }); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale update: %v", err)
	}
	// A failed mutation leaves nothing behind, audit row included.
	boom := errors.New("boom")
	err = s.Mutate(ctx, func(tx store.Tx) error {
		tx.Audit(store.AuditRow{At: now, Actor: "t", Action: "x", Tenant: "acme", Target: "acme/db/bi"})
		return boom
	})
	rows, _ := s.ListAudit(ctx, "acme", 10)
	if !errors.Is(err, boom) || len(rows) != 0 {
		t.Fatalf("rolled back mutation left %d audit rows (%v)", len(rows), err)
	}
	if _, err := s.GetPool(ctx, pool.Key{Tenant: "acme", TenantDB: "db", Pool: "nope"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing pool: %v", err)
	}
}

func openFresh(t testing.TB) store.Store {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, openFresh) }

// BenchmarkFlush100kRows: the flush of 100k closed buckets, one prepared
// upsert in one transaction, with fsync at commit.
func BenchmarkFlush100kRows(b *testing.B) {
	storetest.BenchFlush(b, openFresh, storetest.LoadRows(100_000))
}

// BenchmarkSweepView100kPools: the sweep's one read of 100k banded pools,
// their state and a five-minute window out of ten minutes of load.
func BenchmarkSweepView100kPools(b *testing.B) {
	storetest.BenchSweepView(b, openFresh, 100_000, 10)
}
