// Package storetest is the conformance suite every store.Store passes: the
// SQLite store runs it in its tests, and so does any other implementation.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/band"
	"github.com/qodaperio/autoscale/internal/hook"
	"github.com/qodaperio/autoscale/internal/pool"
	"github.com/qodaperio/autoscale/internal/qodengine"
	"github.com/qodaperio/autoscale/internal/store"
)

// Open returns a fresh, empty store for one test; the suite closes it.
type Open func(t testing.TB) store.Store

// Run runs every conformance test against stores from open.
func Run(t *testing.T, open Open) {
	t.Run("PoolRoundTripAndConditionalUpdate", func(t *testing.T) { testPoolRoundTrip(t, open(t)) })
	t.Run("KeysAndQuotas", func(t *testing.T) { testKeysAndQuotas(t, open(t)) })
	t.Run("LoadFlushIsAdditive", func(t *testing.T) { testLoadFlushIsAdditive(t, open(t)) })
	t.Run("PurgeDropsOldMinutes", func(t *testing.T) { testPurge(t, open(t)) })
	t.Run("SweepViewSeesBandedPools", func(t *testing.T) { testSweepView(t, open(t)) })
	t.Run("StateSavesAreConditional", func(t *testing.T) { testStateVersions(t, open(t)) })
	t.Run("DeleteTakesStateAndLoad", func(t *testing.T) { testDeleteCleansUp(t, open(t)) })
	t.Run("FlushMergesRepeatedRows", func(t *testing.T) { testFlushMerges(t, open(t)) })
	t.Run("ScalingRecords", func(t *testing.T) { testScaling(t, open(t)) })
	t.Run("ScalingRecordsGoWithTheirKeys", func(t *testing.T) { testScalingPrune(t, open(t)) })
}

var (
	ctx = context.Background()
	now = time.UnixMilli(1_800_000_000_000)
	bi  = pool.Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}
	etl = pool.Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "etl"}
)

func insert(t testing.TB, s store.Store, k pool.Key, b *band.Band) {
	t.Helper()
	p := &pool.Pool{Key: k, Roles: pool.Roles{Writeonly: 1, Readonly: 1}, Band: b}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.InsertPool(p, now) }); err != nil {
		t.Fatal(err)
	}
}

func testPoolRoundTrip(t *testing.T, s store.Store) {
	defer s.Close()
	p := &pool.Pool{Key: bi, Roles: pool.Roles{Writeonly: 1, Readonly: 2},
		MaxConcurrentPerNode: 8, Band: &band.Band{Min: 2, Max: 6}, Cohorts: []pool.Cohort{{Name: "etl", Nodes: 1}}}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.InsertPool(p, now) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.InsertPool(p, now) }); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate insert: %v", err)
	}
	got, err := s.GetPool(ctx, bi)
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
		if err := tx.Audit(store.AuditRow{At: now, Actor: "t", Action: "x", Tenant: "acme", Target: bi.String()}); err != nil {
			return err
		}
		return boom
	})
	rows, _ := s.ListAudit(ctx, "acme", 10)
	if !errors.Is(err, boom) || len(rows) != 0 {
		t.Fatalf("rolled back mutation left %d audit rows (%v)", len(rows), err)
	}
	err = s.Mutate(ctx, func(tx store.Tx) error {
		return tx.Audit(store.AuditRow{At: now, Actor: "key:op", Action: "pool.scale", Tenant: "acme", Target: bi.String(), Detail: map[string]any{"toSize": 3}})
	})
	rows, _ = s.ListAudit(ctx, "acme", 10)
	if err != nil || len(rows) != 1 || rows[0].Detail["toSize"] != float64(3) || !rows[0].At.Equal(now) {
		t.Fatalf("audit: %+v, %v", rows, err)
	}
	list, err := s.ListPools(ctx, "")
	if err != nil || len(list) != 1 || list[0].Key != bi {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := s.GetPool(ctx, etl); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing pool: %v", err)
	}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.DeletePool(etl) }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting a missing pool: %v", err)
	}
}

func testKeysAndQuotas(t *testing.T, s store.Store) {
	defer s.Close()
	exp := now.Add(time.Hour)
	k := &store.Key{ID: "k1", Name: "ci", Hash: "h1", Org: "acme", Kind: "admin", ExpiresAt: &exp, AllowedIPs: []string{"10.0.0.0/8"}, CreatedAt: now}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateKey(ctx, &store.Key{ID: "k2", Name: "dup", Hash: "h1", Kind: "admin", CreatedAt: now}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("duplicate hash: %v", err)
	}
	got, err := s.KeyByHash(ctx, "h1")
	if err != nil || got.Org != "acme" || !got.ExpiresAt.Equal(exp) || got.AllowedIPs[0] != "10.0.0.0/8" || got.RevokedAt != nil {
		t.Fatalf("key: %+v, %v", got, err)
	}
	if n, _ := s.CountKeys(ctx); n != 1 {
		t.Fatalf("%d keys", n)
	}
	if err := s.RevokeKey(ctx, "k1", now); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "k1", now); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	if keys, _ := s.ListKeys(ctx); len(keys) != 0 {
		t.Fatalf("revoked key listed: %+v", keys)
	}
	if _, err := s.KeyByHash(ctx, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown hash: %v", err)
	}
	insert(t, s, bi, nil)
	insert(t, s, etl, nil)
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.SetTenantQuota("acme", 5) }); err != nil {
		t.Fatal(err)
	}
	quota, nodes, err := s.TenantQuota(ctx, "acme")
	if err != nil || quota != 5 || nodes != 4 {
		t.Fatalf("quota %d nodes %d, %v", quota, nodes, err)
	}
	err = s.Mutate(ctx, func(tx store.Tx) error {
		n, err := tx.TenantNodes("acme", bi)
		if err != nil || n != 2 {
			return fmt.Errorf("nodes except bi: %d, %v", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testLoadFlushIsAdditive(t *testing.T, s store.Store) {
	defer s.Close()
	rows := []store.LoadRow{{Key: bi, Minute: 100, StatementMs: 1500, Statements: 3}, {Key: bi, Minute: 101, StatementMs: 10, Statements: 1}}
	// Two replicas flush their shares of the same minutes.
	for range 2 {
		if err := s.FlushLoad(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		first, last, want int64
	}{{100, 100, 3000}, {100, 101, 3020}, {101, 105, 20}, {102, 200, 0}} {
		got, err := s.PoolLoad(ctx, bi, c.first, c.last)
		if err != nil || got != c.want {
			t.Errorf("load of minutes %d..%d = %d, %v; want %d", c.first, c.last, got, err, c.want)
		}
	}
	if got, _ := s.PoolLoad(ctx, etl, 0, 1000); got != 0 {
		t.Errorf("another pool's load leaked: %d", got)
	}
}

func testPurge(t *testing.T, s store.Store) {
	defer s.Close()
	var rows []store.LoadRow
	for m := int64(0); m < 90; m++ {
		rows = append(rows, store.LoadRow{Key: bi, Minute: m, StatementMs: 1, Statements: 1})
	}
	if err := s.FlushLoad(ctx, rows); err != nil {
		t.Fatal(err)
	}
	n, err := s.PurgeLoad(ctx, 30)
	if err != nil || n != 30 {
		t.Fatalf("purged %d, %v; want 30", n, err)
	}
	if got, _ := s.PoolLoad(ctx, bi, 0, 1000); got != 60 {
		t.Fatalf("left %d ms, want 60", got)
	}
}

func testSweepView(t *testing.T, s store.Store) {
	defer s.Close()
	insert(t, s, bi, &band.Band{Min: 2, Max: 6})
	insert(t, s, etl, nil) // no band: not swept
	if err := s.FlushLoad(ctx, []store.LoadRow{
		{Key: bi, Minute: 9, StatementMs: 1, Statements: 1}, // before the window
		{Key: bi, Minute: 10, StatementMs: 100, Statements: 1},
		{Key: bi, Minute: 14, StatementMs: 200, Statements: 1},
		{Key: bi, Minute: 15, StatementMs: 1, Statements: 1}, // the open minute
		{Key: etl, Minute: 12, StatementMs: 999, Statements: 1},
	}); err != nil {
		t.Fatal(err)
	}
	st := store.StateRow{Key: bi, State: qodengine.State{OutStreak: 1, LastResume: now}}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.SetAutoscaleState(st) }); err != nil {
		t.Fatal(err)
	}
	view, err := s.SweepView(ctx, 10, 14)
	if err != nil {
		t.Fatal(err)
	}
	if len(view) != 1 {
		t.Fatalf("view has %d pools, want only the banded one: %+v", len(view), view)
	}
	r := view[0]
	if r.Key != bi || r.Band != (band.Band{Min: 2, Max: 6}) || r.Roles.Readonly != 1 || r.Version != 1 {
		t.Errorf("pool %+v", r)
	}
	if r.StatementMs != 300 {
		t.Errorf("window sum %d, want 300", r.StatementMs)
	}
	if r.StateVersion != 1 || r.State.OutStreak != 1 || !r.State.LastResume.Equal(now) || !r.State.LastAction.IsZero() {
		t.Errorf("state %+v", r.State)
	}
}

func testStateVersions(t *testing.T, s store.Store) {
	defer s.Close()
	insert(t, s, bi, &band.Band{Min: 2, Max: 6})
	// First save of a pool never swept.
	skipped, err := s.SaveAutoscaleStates(ctx, []store.StateRow{{Key: bi, State: qodengine.State{InStreak: 4}}})
	if err != nil || skipped != 0 {
		t.Fatalf("first save: skipped %d, %v", skipped, err)
	}
	got, _ := s.AutoscaleState(ctx, bi)
	if got.Version != 1 || got.State.InStreak != 4 {
		t.Fatalf("after first save: %+v", got)
	}
	// A person resets the streaks meanwhile (a manual scale).
	if err := s.Mutate(ctx, func(tx store.Tx) error {
		r, err := tx.AutoscaleState(bi)
		if err != nil {
			return err
		}
		r.State = qodengine.ManuallyScaled(r.State)
		return tx.SetAutoscaleState(r)
	}); err != nil {
		t.Fatal(err)
	}
	// The sweep, holding version 1, must not overwrite the reset.
	skipped, err = s.SaveAutoscaleStates(ctx, []store.StateRow{{Key: bi, State: qodengine.State{InStreak: 5}, Version: 1}})
	if err != nil || skipped != 1 {
		t.Fatalf("stale save: skipped %d, %v", skipped, err)
	}
	got, _ = s.AutoscaleState(ctx, bi)
	if got.Version != 2 || got.State.InStreak != 0 {
		t.Fatalf("stale save overwrote: %+v", got)
	}
	// Two sweeps that both think the row is new: the second loses.
	skipped, _ = s.SaveAutoscaleStates(ctx, []store.StateRow{{Key: bi, State: qodengine.State{InStreak: 9}}})
	if skipped != 1 {
		t.Fatalf("insert over an existing row was not skipped")
	}
}

func testDeleteCleansUp(t *testing.T, s store.Store) {
	defer s.Close()
	insert(t, s, bi, &band.Band{Min: 2, Max: 6})
	if err := s.FlushLoad(ctx, []store.LoadRow{{Key: bi, Minute: 5, StatementMs: 7, Statements: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SaveAutoscaleStates(ctx, []store.StateRow{{Key: bi, State: qodengine.State{Failures: 2}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Mutate(ctx, func(tx store.Tx) error { return tx.DeletePool(bi) }); err != nil {
		t.Fatal(err)
	}
	// A pool created again under the same name starts clean.
	insert(t, s, bi, &band.Band{Min: 2, Max: 6})
	st, _ := s.AutoscaleState(ctx, bi)
	load, _ := s.PoolLoad(ctx, bi, 0, 100)
	if st.Version != 0 || st.State.Failures != 0 || load != 0 {
		t.Fatalf("recreated pool inherited state %+v and load %d", st, load)
	}
}

// LoadRows returns n bucket rows over n/5 pools and five minutes: what a
// replica flushes for a large fleet.
func LoadRows(n int) []store.LoadRow {
	rows := make([]store.LoadRow, n)
	for i := range rows {
		rows[i] = store.LoadRow{Key: pool.Key{Tenant: fmt.Sprintf("t%d", i/5%100), TenantDB: "db", Pool: fmt.Sprintf("p%d", i/5)},
			Minute: 29_000_000 + int64(i%5), StatementMs: 1234, Statements: 3}
	}
	return rows
}

// BenchFlush measures flushing rows into the store; it reports rows/s.
// Every round flushes the next minutes, as a replica does: new rows, not
// updates of the last round's.
func BenchFlush(b *testing.B, open Open, rows []store.LoadRow) {
	s := open(b)
	defer s.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := s.FlushLoad(ctx, rows); err != nil {
			b.Fatal(err)
		}
		for i := range rows {
			rows[i].Minute += 5
		}
	}
	b.ReportMetric(float64(len(rows))*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchSweepView measures the sweep's read: pools banded pools with
// minutes of load each, the window being the last five.
func BenchSweepView(b *testing.B, open Open, pools, minutes int) {
	s := open(b)
	defer s.Close()
	var rows []store.LoadRow
	err := s.Mutate(ctx, func(tx store.Tx) error {
		for i := range pools {
			k := pool.Key{Tenant: fmt.Sprintf("t%d", i%100), TenantDB: "db", Pool: fmt.Sprintf("p%d", i)}
			p := &pool.Pool{Key: k, Roles: pool.Roles{Writeonly: 1, Readonly: 1}, Band: &band.Band{Min: 2, Max: 8}}
			if err := tx.InsertPool(p, now); err != nil {
				return err
			}
			for m := range minutes {
				rows = append(rows, store.LoadRow{Key: k, Minute: int64(m), StatementMs: 1000, Statements: 1})
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.FlushLoad(ctx, rows); err != nil {
		b.Fatal(err)
	}
	first, last := int64(minutes-5), int64(minutes-1)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		view, err := s.SweepView(ctx, first, last)
		if err != nil || len(view) != pools || view[0].StatementMs != 5000 {
			b.Fatalf("view of %d pools (%v)", len(view), err)
		}
	}
}

// A flush may carry the same pool and minute twice; the stores sum them.
func testFlushMerges(t *testing.T, s store.Store) {
	defer s.Close()
	rows := []store.LoadRow{{Key: bi, Minute: 7, StatementMs: 5, Statements: 1}, {Key: bi, Minute: 7, StatementMs: 6, Statements: 2}}
	if err := s.FlushLoad(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.PoolLoad(ctx, bi, 7, 7); got != 11 {
		t.Fatalf("merged load %d, want 11", got)
	}
}

func key(t *testing.T, s store.Store, id, org string, expires *time.Time) {
	t.Helper()
	if err := s.CreateKey(ctx, &store.Key{ID: id, Name: id, Hash: "h-" + id, Org: org, Kind: "admin", ExpiresAt: expires, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
}

func record(host, org, source string, at time.Time) *store.ScalingRecord {
	max := 8
	return &store.ScalingRecord{ID: "sh_" + host, Org: org, Hostname: host, Source: source, AnnouncedAt: at,
		Declaration: hook.Declaration{Hostname: host, URL: "https://hook.example.com/scale", Max: &max}}
}

func testScaling(t *testing.T, s store.Store) {
	defer s.Close()
	key(t, s, "k1", "acme", nil)
	key(t, s, "k2", "acme", nil)
	r := record("app.example.com", "acme", "api", now)
	r.SecretEnc = []byte{1, 2, 3}
	got, created, err := s.PutScaling(ctx, r, "k1", true)
	if err != nil || !created || got.ID != "sh_app.example.com" || !got.State.Armed || string(got.SecretEnc) != "\x01\x02\x03" ||
		got.Version != 1 || *got.Declaration.Max != 8 || len(got.KeyIDs) != 1 {
		t.Fatalf("create: %+v %v %v", got, created, err)
	}
	// The breaker disarmed it; a re-announcement from another key of the
	// org re-arms it, keeps the secret it does not set, and joins the key.
	got.State.Armed, got.State.Failures = false, 5
	if err := s.SaveScalingState(ctx, got.ID, got.State, got.Version); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveScalingState(ctx, got.ID, got.State, got.Version); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale state save: %v", err)
	}
	again := record("app.example.com", "acme", "heartbeat", now.Add(time.Minute))
	again.ID = "sh_other"
	*again.Declaration.Max = 9
	got, created, err = s.PutScaling(ctx, again, "k2", false)
	if err != nil || created || got.ID != "sh_app.example.com" || !got.State.Armed || got.State.Failures != 0 ||
		string(got.SecretEnc) != "\x01\x02\x03" || *got.Declaration.Max != 9 || len(got.KeyIDs) != 2 || !got.AnnouncedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("re-announce: %+v %v %v", got, created, err)
	}
	// Another organization cannot take the hostname.
	if _, _, err := s.PutScaling(ctx, record("app.example.com", "globex", "api", now), "k9", true); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("foreign org: %v", err)
	}
	for _, q := range []string{"sh_app.example.com", "app.example.com"} {
		if r, err := s.GetScaling(ctx, q); err != nil || r.Hostname != "app.example.com" {
			t.Fatalf("get %s: %+v %v", q, r, err)
		}
	}
	s.PutScaling(ctx, record("api.example.com", "acme", "api", now), "k1", false)
	s.PutScaling(ctx, record("www.globex.com", "globex", "api", now), "k1", false)
	if l, _ := s.ListScaling(ctx, "acme", false); len(l) != 2 || l[0].Hostname != "api.example.com" {
		t.Fatalf("acme's list: %+v", l)
	}
	if l, _ := s.ListScaling(ctx, "", true); len(l) != 3 {
		t.Fatalf("the whole list: %d", len(l))
	}
	if err := s.DeleteScaling(ctx, "sh_api.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteScaling(ctx, "sh_api.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.GetScaling(ctx, "api.example.com"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted record: %v", err)
	}
}

func testScalingPrune(t *testing.T, s store.Store) {
	defer s.Close()
	soon := now.Add(time.Hour)
	key(t, s, "live", "acme", nil)
	key(t, s, "expiring", "acme", &soon)
	key(t, s, "revoked", "acme", nil)
	s.PutScaling(ctx, record("a.example.com", "acme", "api", now), "expiring", false)
	s.PutScaling(ctx, record("b.example.com", "acme", "api", now), "revoked", false)
	s.PutScaling(ctx, record("b.example.com", "acme", "api", now), "live", false)
	s.PutScaling(ctx, record("c.example.com", "acme", "heartbeat", now), "live", false)
	if err := s.RevokeKey(ctx, "revoked", now); err != nil {
		t.Fatal(err)
	}
	gone, err := s.PruneScaling(ctx, now.Add(time.Minute), 24*time.Hour)
	if err != nil || len(gone) != 0 {
		t.Fatalf("nothing is due yet: %v %v", gone, err)
	}
	// Two hours on: the only key of a. expired; b. still has a live key.
	gone, _ = s.PruneScaling(ctx, now.Add(2*time.Hour), 24*time.Hour)
	if fmt.Sprint(gone) != "[a.example.com]" {
		t.Fatalf("pruned %v, want a.example.com", gone)
	}
	// Two days on: the heartbeat record was not re-announced.
	gone, _ = s.PruneScaling(ctx, now.Add(48*time.Hour), 24*time.Hour)
	if fmt.Sprint(gone) != "[c.example.com]" {
		t.Fatalf("pruned %v, want c.example.com", gone)
	}
	if l, _ := s.ListScaling(ctx, "acme", false); len(l) != 1 || l[0].Hostname != "b.example.com" {
		t.Fatalf("left %+v", l)
	}
}
