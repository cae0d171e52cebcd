package sqlite

import (
	"context"
	"path/filepath"
	"testing"

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
