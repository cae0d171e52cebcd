package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver"
	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
)

// syncBuffer is a log destination the test reads while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sweepRig is a real server whose sweep loop runs on a fake clock.
type sweepRig struct {
	*harness
	clk     *clock.Fake
	reports chan apiserver.SweepReport
	logs    *syncBuffer
}

// minuteStart is a whole minute, so that sweeps and minutes line up.
var minuteStart = time.Unix(1_800_000_000/60*60, 0).UTC()

func newSweepRig(t *testing.T, settings config.Autoscale) *sweepRig {
	r := &sweepRig{clk: clock.NewFake(minuteStart), reports: make(chan apiserver.SweepReport, 1), logs: &syncBuffer{}}
	r.harness = newHarness(t, apiservertest.Options{
		Autoscale: &settings, Clock: r.clk, RunSweeps: true,
		Logger:  slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		OnSweep: func(rep apiserver.SweepReport) { r.reports <- rep },
	})
	return r
}

// sweep moves the clock to the next sweep and waits until it has run.
func (r *sweepRig) sweep() apiserver.SweepReport {
	r.t.Helper()
	select {
	case <-r.clk.Waiting():
	case <-time.After(10 * time.Second):
		r.t.Fatal("the sweep loop never went back to waiting")
	}
	r.clk.Advance(60 * time.Second)
	select {
	case rep := <-r.reports:
		if rep.Err != nil {
			r.t.Fatalf("sweep at %s: %v", rep.At, rep.Err)
		}
		return rep
	case <-time.After(10 * time.Second):
		r.t.Fatal("no sweep ran after the clock reached it")
	}
	return apiserver.SweepReport{}
}

// load reports n statements of ms each, completed now.
func (r *sweepRig) load(n int, ms int64) api.LoadResponse {
	r.t.Helper()
	stmts := make([]map[string]any, n)
	for i := range stmts {
		stmts[i] = map[string]any{"durationMs": ms, "at": r.clk.Now().Format(time.RFC3339Nano)}
	}
	body, _ := json.Marshal(map[string]any{"tenant": "acme", "tenantDb": "acme_sales", "pool": "bi", "statements": stmts})
	a := r.call("POST", "/api/pool/load", opKey, string(body))
	if a.status != 200 {
		r.t.Fatalf("load: %d %s", a.status, a.body)
	}
	var out api.LoadResponse
	json.Unmarshal(a.body, &out)
	return out
}

func (r *sweepRig) status() api.AutoscaleStatus {
	r.t.Helper()
	a := r.call("GET", "/api/pool/autoscaleStatus?tenant=acme&tenantDb=acme_sales&pool=bi", opKey, "")
	if a.status != 200 {
		r.t.Fatalf("status: %d %s", a.status, a.body)
	}
	var st api.AutoscaleStatus
	if err := json.Unmarshal(a.body, &st); err != nil {
		r.t.Fatal(err)
	}
	return st
}

// events reads the server-sent event stream into a channel.
func (r *sweepRig) events(ctx context.Context) <-chan map[string]any {
	r.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.srv.URL+"/api/events", nil)
	req.Header.Set("Authorization", "Bearer "+opKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		r.t.Fatalf("event stream: %v %v", err, resp)
	}
	out := make(chan map[string]any, 64)
	go func() {
		defer resp.Body.Close()
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "PoolScaled":
				var e map[string]any
				json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e)
				out <- e
			}
		}
	}()
	return out
}

func e2eSettings() config.Autoscale {
	s := config.DefaultAutoscale()
	s.WindowMinutes = 2
	s.InStreak = 3
	s.ScaleOutCooldownSec = 120
	s.ScaleInCooldownSec = 180
	return s
}

// TestAutoscaleEndToEnd drives the real server on a fake clock: load through
// the API takes the pool from 2 up to maxNodes one node at a time, and the
// quiet that follows walks it back down to minNodes. Every action leaves its
// log line, audit row, event and metrics.
func TestAutoscaleEndToEnd(t *testing.T) {
	r := newSweepRig(t, e2eSettings())
	if a := r.call("POST", "/api/pool/create", opKey, `{"tenant":"acme","tenantDb":"acme_sales","pool":"bi","size":2,
		"roleDistribution":{"writeonly":1,"readonly":1,"dual":0},"maxConcurrentPerNode":2,"minNodes":2,"maxNodes":5}`); a.status != 201 {
		t.Fatalf("create: %d %s", a.status, a.body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := r.events(ctx)

	// Busy: ten statements of a minute each, every minute: demand 10.
	var sizes []int
	var rules []string
	for range 12 {
		r.load(10, 60_000)
		r.sweep()
		st := r.status()
		sizes = append(sizes, st.Size)
		rules = append(rules, st.Rule)
	}
	// First sweep: one minute of the two-minute window holds load (demand
	// 5, util 2.5): out streak 1/2. Then one node every other sweep: the
	// streak needs two sweeps and the out cooldown is two sweeps long.
	want := []int{2, 3, 3, 4, 4, 5, 5, 5, 5, 5, 5, 5}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("sizes under load %v, want %v\nrules: %q", sizes, want, rules)
	}
	if rules[0] != "busy: out streak 1/2" || rules[1] != "utilization 5.00 >= 0.80 for 2 sweeps" ||
		rules[2] != "busy: out streak 1/2" || rules[11] != "at maxNodes 5" {
		t.Fatalf("rules %q", rules)
	}

	// The first action's traces, each exactly as documented.
	if !strings.Contains(r.logs.String(), `msg="autoscale: acme/acme_sales/bi out 2 -> 3 util=5.00"`) {
		t.Fatalf("log line missing:\n%s", r.logs.String())
	}
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(r.call("GET", "/api/audit?tenant=acme", opKey, "").body, &audit)
	var scales []api.AuditEntry
	for _, e := range audit.Entries {
		if e.Actor == apiserver.ActorAutoscale && e.Action == "pool.scale" {
			scales = append(scales, e)
		}
	}
	if len(scales) != 3 {
		t.Fatalf("%d autoscale audit rows, want 3: %+v", len(scales), audit.Entries)
	}
	first := scales[len(scales)-1].Detail // newest first
	if first["direction"] != "out" || first["targetSize"] != float64(3) || first["utilization"] != 5.0 {
		t.Fatalf("audit detail %v", first)
	}
	for i, wantTo := range []float64{3, 4, 5} {
		select {
		case e := <-events:
			d := e["data"].(map[string]any)
			if e["type"] != "PoolScaled" || d["fromSize"] != wantTo-1 || d["toSize"] != wantTo || !strings.HasPrefix(d["reason"].(string), "utilization") {
				t.Fatalf("event %d: %v", i, e)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d never arrived", i)
		}
	}
	metrics := r.call("GET", "/metrics", opKey, "")
	for _, line := range []string{
		`qod_autoscale_actions_total{direction="out"} 3`,
		`qod_pool_size{pool="acme/acme_sales/bi",tenant="acme"} 5`,
		`qod_pool_capacity{pool="acme/acme_sales/bi",tenant="acme"} 8`,
		`qod_pool_demand{pool="acme/acme_sales/bi",tenant="acme"} 10`,
		`qod_pool_utilization{pool="acme/acme_sales/bi",tenant="acme"} 1.25`,
		`qod_autoscale_sweep_duration_seconds_count 12`,
	} {
		if !strings.Contains(string(metrics.body), line+"\n") {
			t.Errorf("metrics lack %q", line)
		}
	}

	// Quiet: the first sweep still sees the last busy minute (util 0.63,
	// between the watermarks); then three sweeps at 0 make the in streak,
	// and each node after needs a fresh streak of three, which also covers
	// the three-minute in cooldown. Down to minNodes and no further.
	sizes = sizes[:0]
	for range 16 {
		r.sweep()
		sizes = append(sizes, r.status().Size)
	}
	want = []int{5, 5, 5, 4, 4, 4, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2}
	if fmt.Sprint(sizes) != fmt.Sprint(want) {
		t.Fatalf("sizes in the quiet %v, want %v", sizes, want)
	}
	st := r.status()
	if st.Rule != "at minNodes 2" || st.Size != 2 || st.Utilization == nil || *st.Utilization != 0 {
		t.Fatalf("at rest: %+v", st)
	}
	if !regexp.MustCompile(`msg="autoscale: acme/acme_sales/bi in 3 -> 2 util=0.00"`).MatchString(r.logs.String()) {
		t.Fatal("scale-in log line missing")
	}
	nodes := r.call("GET", "/api/pool/nodes?tenant=acme&tenantDb=acme_sales&pool=bi", opKey, "")
	if strings.Count(string(nodes.body), `"role":"readonly"`) != 1 || strings.Count(string(nodes.body), `"role":"writeonly"`) != 1 {
		t.Fatalf("nodes after scale-in: %s", nodes.body)
	}
}
