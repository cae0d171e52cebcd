package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/store/postgres"
	"github.com/qodaperio/autoscale/internal/store/postgres/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.StopShared()
	os.Exit(code)
}

// replica is one API server of an HA set on one PostgreSQL database.
type replica struct {
	store   *postgres.Store
	leader  *postgres.Leader
	server  *apiserver.Server
	http    *httptest.Server
	reports chan apiserver.SweepReport
}

type haRig struct {
	t        *testing.T
	clk      *clock.Fake
	replicas []*replica
}

func newHARig(t *testing.T, n int) *haRig {
	t.Helper()
	c, err := pgtest.Shared()
	if err != nil {
		t.Fatalf("PostgreSQL for the HA tests: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	url, err := c.NewDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rig := &haRig{t: t, clk: clock.NewFake(minuteStart)}
	var loops []chan struct{}
	for i := range n {
		st, err := postgres.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := apiserver.EnsureOperatorKey(ctx, st, opKey, minuteStart); err != nil {
				t.Fatal(err)
			}
		}
		r := &replica{store: st, leader: st.NewLeader(postgres.SweepLock), reports: make(chan apiserver.SweepReport, 4)}
		r.server = apiserver.New(apiserver.Deps{Store: st, Autoscale: e2eSettings(), Clock: rig.clk, Leader: r.leader,
			OnSweep: func(rep apiserver.SweepReport) { r.reports <- rep }})
		r.http = httptest.NewServer(r.server.Handler())
		done := make(chan struct{})
		loops = append(loops, done)
		go func() { defer close(done); _ = r.server.RunSweeps(ctx) }()
		rig.replicas = append(rig.replicas, r)
	}
	t.Cleanup(func() {
		cancel()
		for i, r := range rig.replicas {
			<-loops[i]
			r.http.Close()
			r.leader.Close()
			r.store.Close()
		}
	})
	return rig
}

// waitLoops waits until every replica's loop is asleep on the clock.
func (h *haRig) waitLoops() {
	h.t.Helper()
	deadline := time.After(10 * time.Second)
	for h.clk.Waiters() < len(h.replicas) {
		select {
		case <-h.clk.Waiting():
		case <-deadline:
			h.t.Fatalf("only %d of %d sweep loops are waiting", h.clk.Waiters(), len(h.replicas))
		}
	}
}

// sweep runs one sweep on every replica: the instant (all flush), then the
// flush grace (the leader decides). It returns the index of the replica that
// led, and fails if none or several did.
func (h *haRig) sweep() int {
	h.t.Helper()
	h.waitLoops()
	h.clk.Advance(time.Duration(60-h.clk.Now().Unix()%60) * time.Second) // to the next whole minute
	h.waitLoops()
	h.clk.Advance(apiserver.DefaultFlushGrace)
	leader := -1
	for i, r := range h.replicas {
		select {
		case rep := <-r.reports:
			if rep.Err != nil {
				h.t.Fatalf("replica %d: %v", i, rep.Err)
			}
			if rep.Leader {
				if leader >= 0 {
					h.t.Fatalf("replicas %d and %d both led the sweep at %s", leader, i, rep.At)
				}
				leader = i
			}
		case <-time.After(10 * time.Second):
			h.t.Fatalf("replica %d reported no sweep", i)
		}
	}
	return leader
}

func (h *haRig) call(i int, method, path, body string) answer {
	h.t.Helper()
	return callURL(h.t, h.replicas[i].http.URL, method, path, opKey, body)
}

// TestHAReplicasShareOneLeader runs three replicas on one PostgreSQL: load
// reported to all three is summed in the leader's window, exactly one
// replica acts per sweep, the pool reads the same from every replica, and
// when the leader's connection is cut another replica takes over within two
// sweeps.
func TestHAReplicasShareOneLeader(t *testing.T) {
	h := newHARig(t, 3)
	if a := h.call(0, "POST", "/api/pool/create", `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,
		"roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"maxConcurrentPerNode":2,"minNodes":2,"maxNodes":5}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	// Ten minute-long statements a minute, reported 4 + 3 + 3 to the three
	// replicas: only their sum makes demand 10.
	load := func() {
		at := h.clk.Now().Format(time.RFC3339)
		for i, n := range []int{4, 3, 3} {
			stmts := strings.TrimSuffix(strings.Repeat(`{"durationMs":60000,"at":"`+at+`"},`, n), ",")
			if a := h.call(i, "POST", "/api/pool/load", `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","statements":[`+stmts+`]}`); a.status != 200 {
				t.Fatalf("load on replica %d: %d %s", i, a.status, a.body)
			}
		}
	}
	var sizes, leaders []int
	cut := false
	for sweep := range 10 {
		load()
		if sweep == 4 {
			// Cut the current leader's connection, as a network failure
			// would, between two sweeps.
			old := leaders[len(leaders)-1]
			pid := h.replicas[old].leader.PID()
			if pid == 0 {
				t.Fatalf("replica %d led but holds no connection", old)
			}
			if _, err := h.replicas[(old+1)%3].store.Pool().Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			cut = true
		}
		l := h.sweep()
		leaders = append(leaders, l)
		var p api.Pool
		for i := range h.replicas {
			a := h.call(i, "GET", "/api/pool/get?tenant=acme&tenantDb=acme_sales&pool=bi", "")
			var pi api.Pool
			json.Unmarshal(a.body, &pi)
			if i > 0 && (pi.Size != p.Size || pi.Version != p.Version) {
				t.Fatalf("sweep %d: replica %d reads size %d v%d, replica 0 reads size %d v%d", sweep, i, pi.Size, pi.Version, p.Size, p.Version)
			}
			p = pi
		}
		sizes = append(sizes, p.Size)
	}
	if !cut {
		t.Fatal("the leader's connection was never cut")
	}
	// No sweep without a leader except, at most, the one right after the
	// cut; and a new leader then.
	for i, l := range leaders {
		if l < 0 && i != 4 {
			t.Fatalf("sweep %d had no leader: %v", i, leaders)
		}
	}
	if leaders[5] < 0 || leaders[5] == leaders[3] {
		t.Fatalf("no other replica took over within two sweeps of the cut: leaders %v", leaders)
	}
	// Demand 10 only from the sum of the three replicas' load: exactly the
	// single server's path to max (TestAutoscaleEndToEnd), the failover
	// included, since the new leader reads the streaks and cooldowns the
	// old one stored.
	if want := []int{2, 3, 3, 4, 4, 5, 5, 5, 5, 5}; fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("sizes %v, want %v (leaders %v)", sizes, want, leaders)
	}
	// Exactly one audit row per node added: no sweep acted twice.
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(h.call(2, "GET", "/api/audit?tenant=acme", "").body, &audit)
	at := map[time.Time]int{}
	actions := 0
	for _, e := range audit.Entries {
		if e.Actor == apiserver.ActorAutoscale {
			actions++
			at[e.At]++
			if at[e.At] > 1 {
				t.Fatalf("two actions at %s", e.At)
			}
		}
	}
	if actions != 3 {
		t.Fatalf("%d autoscale actions for 2 -> 5, want 3 (leaders %v, sizes %v)", actions, leaders, sizes)
	}
}
