package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/pool"
)

func (r *sweepRig) createBI(extra string) {
	r.t.Helper()
	if a := r.call("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,
		"roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"maxConcurrentPerNode":2,"minNodes":2,"maxNodes":5`+extra+`}`); a.status != 201 {
		r.t.Fatalf("create: %d %s", a.status, a.body)
	}
}

func (r *sweepRig) auditActions(actor string) []api.AuditEntry {
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(r.call("GET", "/api/audit?tenant=acme", opKey, "").body, &audit)
	var out []api.AuditEntry
	for _, e := range audit.Entries {
		if e.Actor == actor {
			out = append(out, e)
		}
	}
	return out
}

// A statement for a suspended pool wakes it at minNodes, audited under its
// own actor, and the wake starts the out cooldown.
func TestAStatementWakesASuspendedPool(t *testing.T) {
	settings := e2eSettings()
	settings.ScaleOutCooldownSec = 180
	r := newSweepRig(t, settings)
	r.createBI("")
	r.call("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":3}`)
	r.call("POST", "/api/pool/suspend", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi"}`)
	if got := r.load(1, 10); !got.Woke || got.Recorded != 1 {
		t.Fatalf("load on a suspended pool: %+v", got)
	}
	st := r.status()
	if st.Suspended || st.Size != 2 || st.OutCooldownLeft != 180 || st.LastResume == nil || !st.LastResume.Equal(minuteStart) {
		t.Fatalf("after the wake: %+v", st)
	}
	wakes := r.auditActions(apiserver.ActorWake)
	if len(wakes) != 1 || wakes[0].Action != "pool.resume" || wakes[0].Detail["toSize"] != float64(2) {
		t.Fatalf("wake audit: %+v", wakes)
	}
	if got := r.load(1, 10); got.Woke {
		t.Fatal("a running pool reported a wake")
	}
	// Busy right after the wake: the streak builds, the cooldown holds the
	// pool until three minutes after the wake.
	var rules []string
	for range 3 {
		r.load(10, 60_000)
		r.sweep()
		rules = append(rules, r.status().Rule)
	}
	want := []string{"busy: out streak 1/2", "in out cooldown: 60 s left", "utilization 5.00 >= 0.80 for 3 sweeps"}
	if strings.Join(rules, "|") != strings.Join(want, "|") {
		t.Fatalf("after a wake: %q, want %q", rules, want)
	}
}

// With enabled: false the sweep still flushes the load but decides nothing.
func TestKillSwitch(t *testing.T) {
	s := e2eSettings()
	s.Enabled = false
	r := newSweepRig(t, s)
	r.createBI("")
	for range 4 {
		r.load(10, 60_000)
		rep := r.sweep()
		if rep.Pools != 0 || rep.Actions != 0 {
			t.Fatalf("a disabled sweep decided: %+v", rep)
		}
	}
	st := r.status()
	if st.Size != 2 || st.Enabled || st.Rule != "autoscale disabled (enabled: false)" || st.RuleCode != "disabled" {
		t.Fatalf("disabled: %+v", st)
	}
	k := pool.Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}
	first := minuteStart.Unix() / 60
	if ms, err := r.srv.Store.PoolLoad(context.Background(), k, first, first+10); err != nil || ms != 4*10*60_000 {
		t.Fatalf("flushed load %d ms (%v), want the four closed minutes", ms, err)
	}
}

// An action the tenant's quota refuses is a failure: three in a row send
// the pool into backoff, each logged as a warning with the decision.
func TestQuotaRefusalsAreFailuresAndBackOff(t *testing.T) {
	r := newSweepRig(t, e2eSettings())
	r.createBI("")
	if _, err := r.srv.Client.SetQuota(context.Background(), "acme", 2); err != nil {
		t.Fatal(err)
	}
	var failures []int
	for range 6 {
		r.load(10, 60_000)
		failures = append(failures, r.sweep().Failures)
	}
	// Sweep 1 builds the streak; 2, 3 and 4 fail; then backoff.
	if got := failures; got[0] != 0 || got[1] != 1 || got[2] != 1 || got[3] != 1 || got[4] != 0 || got[5] != 0 {
		t.Fatalf("failures per sweep %v", got)
	}
	st := r.status()
	if st.Size != 2 || st.BackoffSweepsLeft != 3 || !strings.HasPrefix(st.Rule, "failure backoff: 3 sweep(s) left") {
		t.Fatalf("in backoff: %+v", st)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `level=WARN msg="autoscale: acme/acme_sales/bi out 2 -> 3 failed: quota_exceeded:`) ||
		!strings.Contains(logs, "failure 1 of 3; the next sweep retries") ||
		!strings.Contains(logs, "3 failures in a row: skipping the pool for 5 sweeps") {
		t.Fatalf("warnings:\n%s", logs)
	}
	if got := r.auditActions(apiserver.ActorAutoscale); len(got) != 0 {
		t.Fatalf("refused actions left audit rows: %+v", got)
	}
}

// A manual scale resets the streaks the sweep built, and starts no cooldown.
func TestManualScaleResetsTheStreaks(t *testing.T) {
	r := newSweepRig(t, e2eSettings())
	r.createBI("")
	r.load(10, 60_000)
	r.sweep()
	if st := r.status(); st.OutStreak.Count != 1 {
		t.Fatalf("streak after one busy sweep: %+v", st.OutStreak)
	}
	r.call("POST", "/api/pool/scale", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","targetSize":3}`)
	st := r.status()
	if st.OutStreak.Count != 0 || st.OutCooldownLeft != 0 || st.InCooldownLeft != 0 {
		t.Fatalf("after a manual scale: %+v", st)
	}
	r.load(10, 60_000)
	r.sweep()
	if st := r.status(); st.Size != 3 || st.Rule != "busy: out streak 1/2" {
		t.Fatalf("the sweep after a manual scale: size %d, %q", st.Size, st.Rule)
	}
}

// A reader marked unroutable carries no capacity; with none left the sweep
// decides nothing for the pool.
func TestUnroutableReadersCarryNoCapacity(t *testing.T) {
	r := newSweepRig(t, e2eSettings())
	r.createBI("")
	if err := r.srv.Client.SetRoutable(context.Background(), api.SetRoutableRequest{PoolRef: api.PoolRef{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"},
		Role: "readonly", Index: ptr(0), Routable: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.load(10, 60_000)
		r.sweep()
	}
	st := r.status()
	if st.Size != 2 || st.Utilization != nil || st.Capacity != 0 || st.UnroutableReaders != 1 ||
		st.Rule != "capacity unknown: no routable read-capable node" || st.OutStreak.Count != 0 {
		t.Fatalf("no routable reader: %+v", st)
	}
	if got := r.auditActions("key:operator"); len(got) == 0 || got[0].Action != "pool.setRoutable" {
		t.Fatalf("marking was not audited: %+v", got)
	}
}

// A pool without a band is left alone and says so.
func TestUnbandedPoolsAreLeftAlone(t *testing.T) {
	r := newSweepRig(t, e2eSettings())
	r.call("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2}`)
	r.load(100, 60_000)
	r.sweep()
	r.load(100, 60_000)
	if rep := r.sweep(); rep.Pools != 0 {
		t.Fatalf("an unbanded pool was swept: %+v", rep)
	}
	if st := r.status(); st.Banded || st.RuleCode != "no_band" || st.Size != 2 {
		t.Fatalf("unbanded: %+v", st)
	}
}

func ptr[T any](v T) *T { return &v }
