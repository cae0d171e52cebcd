package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
)

// receiver is a scale endpoint that records every call.
type receiver struct {
	mu     sync.Mutex
	calls  []receivedCall
	status int
	srv    *httptest.Server
}

type receivedCall struct {
	body map[string]any
	auth string
	key  string
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{status: 202}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		json.Unmarshal(b, &body)
		rc.mu.Lock()
		rc.calls = append(rc.calls, receivedCall{body: body, auth: r.Header.Get("Authorization"), key: r.Header.Get("Idempotency-Key")})
		status := rc.status
		rc.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []receivedCall {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]receivedCall(nil), rc.calls...)
}

type hookRig struct {
	*harness
	clk *clock.Fake
	rc  *receiver
}

func newHookRig(t *testing.T) *hookRig {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(minuteStart)
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1"}, Clock: clk})
	return &hookRig{harness: h, clk: clk, rc: newReceiver(t)}
}

func (r *hookRig) hookURL() string {
	u, _ := url.Parse(r.rc.srv.URL)
	return "http://hooks.test:" + u.Port() + "/scale"
}

// tick runs the loop once a second for n seconds, waiting for the calls.
func (r *hookRig) tick(n int) {
	for range n {
		r.clk.Advance(time.Second)
		r.srv.Server.HookTickAt(context.Background(), r.clk.Now())
		r.srv.Server.WaitHookCalls()
	}
}

func (r *hookRig) heartbeat(key, client string, maxConcurrent, inflight int) {
	r.t.Helper()
	r.mustCall("POST", "/api/clients/heartbeat", key, `{"client_id":"`+client+`","hostname":"app.example.com","target":"http://127.0.0.1:3000",
		"max_concurrent":`+itoa(maxConcurrent)+`,"inflight":`+itoa(inflight)+`}`, 200)
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// Four saturated clients for a full window make exactly one scale_out call,
// with the reference body, the Bearer secret and an Idempotency-Key; it is
// audited and published.
func TestHookLoopScalesOutOnceAfterAWindow(t *testing.T) {
	r := newHookRig(t)
	acme := r.newKey(api.CreateKeyRequest{Name: "acme", Org: "acme"})
	r.mustCall("PUT", "/api/scaling/app.example.com", acme, `{"url":"`+r.hookURL()+`","max":8,"window":"15s","cooldown":"60s","secret":"s3cret"}`, 201)
	busy := func() {
		for i := range 4 {
			r.heartbeat(acme, "c"+itoa(i), 10, 8)
		}
	}
	busy()
	r.tick(14)
	if n := len(r.rc.got()); n != 0 {
		t.Fatalf("%d calls before the window closed", n)
	}
	busy()
	r.tick(2)
	calls := r.rc.got()
	if len(calls) != 1 {
		t.Fatalf("%d calls after the window, want 1", len(calls))
	}
	c := calls[0]
	want := map[string]any{"reason": "scale_out", "hostname": "app.example.com", "path": nil, "org_id": "acme",
		"current": 4.0, "desired": 5.0, "min": 0.0, "max": 8.0}
	if len(c.body) != len(want) {
		t.Fatalf("body %v", c.body)
	}
	for k, v := range want {
		if c.body[k] != v {
			t.Fatalf("body[%s] = %v, want %v (body %v)", k, c.body[k], v, c.body)
		}
	}
	if c.auth != "Bearer s3cret" || len(c.key) != 32 {
		t.Fatalf("headers: auth %q key %q", c.auth, c.key)
	}
	// The record shows the live pool the loop samples.
	rec := scalingRecord(t, r.mustCall("GET", "/api/scaling/app.example.com", acme, "", 200))
	if rec.Pool == nil || rec.Pool.Instances != 4 || rec.Pool.Capacity != 40 || rec.Pool.Inflight != 32 || *rec.Pool.Utilization != 0.8 {
		t.Fatalf("live pool %+v", rec.Pool)
	}
	// Cooldown: still saturated, no second call for a minute.
	busy()
	r.tick(20)
	if n := len(r.rc.got()); n != 1 {
		t.Fatalf("%d calls inside the cooldown", n)
	}
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(r.mustCall("GET", "/api/audit?tenant=acme", opKey, "", 200).body, &audit)
	if audit.Entries[0].Action != "scaling_requested" || audit.Entries[0].Detail["desired"] != 5.0 ||
		strings.Contains(string(mustJSON(audit.Entries[0].Detail)), "s3cret") {
		t.Fatalf("audit: %+v", audit.Entries[0])
	}
}

// A sleeping hostname with requests waiting makes one cold_start call; five
// failing calls in a row disarm the record, with an alert.
func TestHookLoopColdStartAndBreaker(t *testing.T) {
	r := newHookRig(t)
	r.rc.status = 500
	r.mustCall("PUT", "/api/scaling/app.example.com", opKey, `{"url":"`+r.hookURL()+`","min":0,"max":4,"cooldown":"60s"}`, 201)
	r.srv.Server.HoldForTest("app.example.com", 100)
	r.tick(1)
	calls := r.rc.got()
	if len(calls) != 1 || calls[0].body["reason"] != "cold_start" || calls[0].body["desired"] != 1.0 || calls[0].body["org_id"] != nil {
		t.Fatalf("cold start: %+v", calls)
	}
	// Failures back off 1, 2, 4, 8 s: the fifth call comes 15 s after the
	// first, and disarms.
	r.tick(40)
	calls = r.rc.got()
	if len(calls) != 5 {
		t.Fatalf("%d calls, want 5 before the breaker", len(calls))
	}
	if calls[0].key != calls[4].key {
		t.Fatal("retries of one decision changed the Idempotency-Key")
	}
	rec := scalingRecord(t, r.mustCall("GET", "/api/scaling/app.example.com", opKey, "", 200))
	if rec.Armed || rec.Breaker != "open" || rec.Failures != 5 {
		t.Fatalf("after five failures: %+v", rec)
	}
	// Re-declaring re-arms it.
	r.rc.status = 200
	rec = scalingRecord(t, r.mustCall("PUT", "/api/scaling/app.example.com", opKey, `{"url":"`+r.hookURL()+`","min":0,"max":4}`, 200))
	if !rec.Armed || rec.Breaker != "closed" {
		t.Fatalf("re-armed: %+v", rec)
	}
	r.tick(1)
	if n := len(r.rc.got()); n != 6 {
		t.Fatalf("no call after re-arming: %d", n)
	}
	var audit struct {
		Entries []api.AuditEntry `json:"entries"`
	}
	json.Unmarshal(r.mustCall("GET", "/api/audit", opKey, "", 200).body, &audit)
	found := false
	for _, e := range audit.Entries {
		if e.Action == "scaling_disarmed" && strings.Contains(e.Detail["reason"].(string), "breaker") {
			found = true
		}
	}
	if !found {
		t.Fatal("no breaker alert in the audit log")
	}
}

// A heartbeat's scaling block announces the record (source heartbeat) and
// re-arms it; with scaling off it says so.
func TestHeartbeatAnnouncesTheDeclaration(t *testing.T) {
	r := newHookRig(t)
	client := r.newKey(api.CreateKeyRequest{Name: "edge-client", Org: "acme", Kind: "client"})
	a := r.mustCall("POST", "/api/clients/heartbeat", client, `{"client_id":"c1","hostname":"app.example.com","max_concurrent":10,
		"scaling":{"url":"`+r.hookURL()+`","max":3}}`, 200)
	var out struct {
		Scaling map[string]any `json:"scaling"`
	}
	json.Unmarshal(a.body, &out)
	if out.Scaling["accepted"] != true {
		t.Fatalf("announce: %s", a.body)
	}
	rec := scalingRecord(t, r.mustCall("GET", "/api/scaling/app.example.com", client, "", 200))
	if rec.Source != "heartbeat" || rec.Org != "acme" || rec.Max != 3 {
		t.Fatalf("announced: %+v", rec)
	}
	bad := r.mustCall("POST", "/api/clients/heartbeat", client, `{"client_id":"c1","hostname":"app.example.com","scaling":{"url":"https://nowhere.test/","max":3}}`, 200)
	if !strings.Contains(string(bad.body), "destination_refused") {
		t.Fatalf("a refused announcement: %s", bad.body)
	}
	for body, want := range map[string]string{
		`{"hostname":"app.example.com"}`:                             "client_id is required",
		`{"client_id":"c","hostname":"App"}`:                         "is not a DNS name",
		`{"client_id":"c","hostname":"a.example.com","state":"up"}`:  `state "up" is not accepted; accepted: active, draining, disabled`,
		`{"client_id":"c","hostname":"a.example.com","priority":-1}`: "priority is -1",
	} {
		if a := r.call("POST", "/api/clients/heartbeat", client, body); a.status != 400 || !strings.Contains(a.err.Message, want) {
			t.Errorf("%s: %d %+v, want %q", body, a.status, a.err, want)
		}
	}
}

// Fifty binds due at once: never more than eight calls in flight, and every
// one of the fifty is made (queued, not dropped).
func TestAtMostEightCallsInFlight(t *testing.T) {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(minuteStart)
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1"}, Clock: clk})
	var mu sync.Mutex
	inFlight, peak := 0, 0
	arrived, release := make(chan struct{}, 64), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		peak = max(peak, inFlight)
		mu.Unlock()
		arrived <- struct{}{}
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	for i := range 50 {
		host := "app" + itoa(i) + ".example.com"
		h.mustCall("PUT", "/api/scaling/"+host, opKey, `{"url":"http://hooks.test:`+u.Port()+`/scale","max":2}`, 201)
		h.srv.Server.HoldForTest(host, 1)
	}
	ctx := context.Background()
	made := 0
	for round := 0; made < 50; round++ {
		if round > 20 {
			t.Fatalf("only %d of 50 calls made", made)
		}
		clk.Advance(time.Second)
		h.srv.Server.HookTickAt(ctx, clk.Now())
		want := min(8, 50-made)
		for range want {
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: %d calls arrived, want %d", round, made, want)
			}
			made++
		}
		mu.Lock()
		if inFlight != want {
			t.Fatalf("round %d: %d calls in flight, want %d", round, inFlight, want)
		}
		mu.Unlock()
		for range want {
			release <- struct{}{}
		}
		h.srv.Server.WaitHookCalls()
	}
	if peak != 8 {
		t.Fatalf("peak calls in flight %d, want the limit 8", peak)
	}
}

// The secret appears in no log line, API answer, audit row or event.
func TestSecretNeverLeaks(t *testing.T) {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(minuteStart)
	logs := &syncBuffer{}
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1"}, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	rc := newReceiver(t)
	rc.status = 500
	u, _ := url.Parse(rc.srv.URL)
	sub, _, _ := h.srv.Server.Events().Subscribe(0, nil)
	const secret = "VERY-SECRET-TOKEN-8271"
	var answers []string
	answers = append(answers, string(h.mustCall("PUT", "/api/scaling/app.example.com", opKey,
		`{"url":"http://hooks.test:`+u.Port()+`/scale?token=abc","max":2,"secret":"`+secret+`"}`, 201).body))
	h.srv.Server.HoldForTest("app.example.com", 1)
	for range 40 {
		clk.Advance(time.Second)
		h.srv.Server.HookTickAt(context.Background(), clk.Now())
		h.srv.Server.WaitHookCalls()
	}
	if calls := rc.got(); len(calls) != 5 || calls[0].auth != "Bearer "+secret {
		t.Fatalf("calls: %d", len(calls))
	}
	for _, path := range []string{"/api/scaling", "/api/scaling/app.example.com", "/api/audit", "/metrics"} {
		answers = append(answers, string(h.mustCall("GET", path, opKey, "", 200).body))
	}
	var events []string
	for len(sub.C) > 0 {
		events = append(events, string(mustJSON(<-sub.C)))
	}
	if len(events) < 6 {
		t.Fatalf("only %d events", len(events))
	}
	for where, text := range map[string]string{"logs": logs.String(), "answers": strings.Join(answers, "\n"), "events": strings.Join(events, "\n")} {
		if strings.Contains(text, secret) {
			t.Errorf("the secret leaked into the %s", where)
		}
		// The URL's query may carry a token too: only its owner's API
		// answers show the URL, never a log line or an event.
		if where != "answers" && strings.Contains(text, "token=abc") {
			t.Errorf("the URL's query leaked into the %s", where)
		}
	}
	// Nor in the database: it holds the secret sealed only.
	dbFiles, _ := filepath.Glob(filepath.Join(filepath.Dir(h.srv.DBPath()), "*"))
	for _, f := range dbFiles {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(secret)) {
			t.Errorf("the database file %s holds the secret in clear", filepath.Base(f))
		}
	}
	// A heartbeat that announces the declaration re-arms the record.
	rec := scalingRecord(t, h.mustCall("GET", "/api/scaling/app.example.com", opKey, "", 200))
	if rec.Armed {
		t.Fatal("five failures did not disarm")
	}
	h.mustCall("POST", "/api/clients/heartbeat", opKey, `{"client_id":"c1","hostname":"app.example.com","scaling":{"url":"http://hooks.test:`+u.Port()+`/scale","max":2}}`, 200)
	if rec := scalingRecord(t, h.mustCall("GET", "/api/scaling/app.example.com", opKey, "", 200)); !rec.Armed || rec.Breaker != "closed" {
		t.Fatalf("a heartbeat did not re-arm: %+v", rec)
	}
}

// Events reach the operator's webhooks through the fence; a webhook the
// fence refuses gets nothing.
func TestEventWebhooks(t *testing.T) {
	got := make(chan map[string]any, 16)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e map[string]any
		json.NewDecoder(r.Body).Decode(&e)
		if r.Header.Get("X-Event-Type") != e["type"] {
			t.Errorf("X-Event-Type %q for event %v", r.Header.Get("X-Event-Type"), e["type"])
		}
		got <- e
	}))
	defer sink.Close()
	u, _ := url.Parse(sink.URL)
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	a.OutboundAllowlist = []string{"hooks.test"}
	a.EventWebhooks = []string{"http://hooks.test:" + u.Port() + "/events", "http://elsewhere.test:" + u.Port() + "/events"}
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1", "elsewhere.test": "127.0.0.1"}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); h.srv.Server.RunWebhooks(ctx) }()
	defer func() { cancel(); <-done }()
	// Two events; deliveries go out in order, URL by URL, so when the
	// second one arrives the refused URL has had its turn at the first.
	for _, host := range []string{"app.example.com", "www.example.com"} {
		r := scalingRecord(t, h.mustCall("PUT", "/api/scaling/"+host, opKey, `{"url":"http://hooks.test:`+u.Port()+`/scale","max":2}`, 201))
		h.mustCall("DELETE", "/api/scaling/"+r.ID, opKey, "", 200)
	}
	for _, want := range []string{"app.example.com", "www.example.com"} {
		select {
		case e := <-got:
			d := e["data"].(map[string]any)
			if e["type"] != "scaling_disarmed" || d["hostname"] != want {
				t.Fatalf("event %v, want %s's disarm (the refused webhook must receive nothing)", e, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %s delivered", want)
		}
	}
}
