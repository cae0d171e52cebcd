package postgres

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/store/postgres/pgtest"
	"github.com/qodaperio/autoscale/internal/store/storetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

// openFresh opens a store on a new, empty database of the test cluster.
func openFresh(t testing.TB) store.Store {
	t.Helper()
	c, err := pgtest.Shared()
	if err != nil {
		t.Fatalf("PostgreSQL for the tests: %v", err)
	}
	ctx := context.Background()
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, openFresh) }

func TestMigrationsApplyOnce(t *testing.T) {
	s := openFresh(t).(*Store)
	defer s.Close()
	ctx := context.Background()
	if err := s.migrate(ctx); err != nil { // a second replica starting
		t.Fatal(err)
	}
	if v, err := s.SchemaVersion(ctx); err != nil || v != len(migrations) {
		t.Fatalf("schema version %d, %v", v, err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestBadURLNamesTheSettingAndHidesThePassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://app:s3cret@host:notaport/db")
	if err == nil || !strings.Contains(err.Error(), "QOD_DATABASE_URL") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad URL: %v", err)
	}
}

// BenchmarkFlush100kRows: COPY into a temporary table, then one INSERT ...
// SELECT ... ON CONFLICT, in one transaction.
func BenchmarkFlush100kRows(b *testing.B) {
	storetest.BenchFlush(b, openFresh, storetest.LoadRows(100_000))
}

func BenchmarkSweepView100kPools(b *testing.B) {
	storetest.BenchSweepView(b, openFresh, 100_000, 10)
}

func TestLeaderLosesTheLockWithItsConnection(t *testing.T) {
	s := openFresh(t).(*Store)
	defer s.Close()
	ctx := context.Background()
	a, b := s.NewLeader(SweepLock), s.NewLeader(SweepLock)
	defer a.Close()
	defer b.Close()
	if !a.Leading(ctx) || b.Leading(ctx) {
		t.Fatal("want exactly the first replica leading")
	}
	if !a.Leading(ctx) {
		t.Fatal("the leader lost the lock without cause")
	}
	// Cut the leader's connection from outside, as a network failure or
	// an operator would.
	if _, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, a.PID()); err != nil {
		t.Fatal(err)
	}
	if a.Leading(ctx) {
		t.Fatal("the old leader still claims leadership after losing its connection")
	}
	if !b.Leading(ctx) {
		t.Fatal("the other replica did not take over")
	}
	if a.Leading(ctx) {
		t.Fatal("two leaders")
	}
}
