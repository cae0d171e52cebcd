package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/testwait"
)

type edgeRig struct {
	*harness
	clk  *clock.Fake
	edge string // the edge's base URL
	rc   *receiver
}

func newEdgeRig(t *testing.T, slots int) *edgeRig {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(minuteStart)
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1"}, Clock: clk, EdgeSlots: slots})
	edgeURL, err := h.srv.StartEdge()
	if err != nil {
		t.Fatal(err)
	}
	// Whatever happened, no request stays held past the test: spend every
	// budget before the edge closes (cleanups run last-in first-out).
	t.Cleanup(func() { clk.Advance(24 * time.Hour) })
	return &edgeRig{harness: h, clk: clk, edge: edgeURL, rc: newReceiver(t)}
}

// request sends one request for host through the edge.
func (r *edgeRig) request(method, host, body string) (int, string) {
	req, _ := http.NewRequest(method, r.edge+"/path?q=1", strings.NewReader(body))
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *edgeRig) register(host, client, target string, maxConcurrent, priority int, state string) {
	r.t.Helper()
	r.mustCall("POST", "/api/clients/heartbeat", opKey, fmt.Sprintf(`{"client_id":%q,"hostname":%q,"target":%q,"max_concurrent":%d,"priority":%d,"state":%q}`,
		client, host, target, maxConcurrent, priority, state), 200)
}

// echo is a backend that answers with its name and the request it saw.
func echo(t *testing.T, name string, hits *atomic.Int64) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s %s xff=%s body=%s", name, r.Method, r.Host, r.URL.RequestURI(), r.Header.Get("X-Forwarded-For"), b)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestEdgeRoutesByHostPrimaryFirst(t *testing.T) {
	r := newEdgeRig(t, 0)
	var pHits, sHits atomic.Int64
	primary, standby := echo(t, "primary", &pHits), echo(t, "standby", &sHits)
	r.register("app.example.com", "p", primary.URL, 10, 0, "active")
	r.register("app.example.com", "s", standby.URL, 10, 1, "active")
	for range 5 {
		code, body := r.request("POST", "app.example.com:80", "hello")
		if code != 200 || !strings.HasPrefix(body, "primary POST app.example.com:80 /path?q=1 xff=127.0.0.1 body=hello") {
			t.Fatalf("%d %q", code, body)
		}
	}
	if sHits.Load() != 0 {
		t.Fatal("a standby client served while a primary was routable")
	}
	// The primary drains: new requests go to the standby.
	r.register("app.example.com", "p", primary.URL, 10, 0, "draining")
	if _, body := r.request("GET", "app.example.com", ""); !strings.HasPrefix(body, "standby") {
		t.Fatalf("with the primary draining: %q", body)
	}
	if code, body := r.request("GET", "unknown.example.com", ""); code != 502 || !strings.Contains(body, "no client serves unknown.example.com") {
		t.Fatalf("unknown host: %d %q", code, body)
	}
}

// waitHeld yields until n requests are held for host.
func (r *edgeRig) waitHeld(host string, n int) {
	r.t.Helper()
	testwait.For(r.t, fmt.Sprintf("%d requests held for %s", n, host), func() bool { return r.srv.Server.HeldRequests(host) >= n })
}

// A burst of 200 requests to a sleeping hostname makes one hook call; all
// complete once a client registers, each once, POST bodies intact; held
// requests take no global slot, so a healthy hostname keeps serving.
func TestEdgeColdStartBurst(t *testing.T) {
	r := newEdgeRig(t, 20)
	r.mustCall("PUT", "/api/scaling/sleepy.example.com", opKey, `{"url":"`+strings.Replace(r.rc.srv.URL, "127.0.0.1", "hooks.test", 1)+`/scale","min":0,"max":2,"cold_start":"45s"}`, 201)
	if err := r.srv.Server.RefreshHooks(context.Background()); err != nil {
		t.Fatal(err)
	}
	var healthyHits, backendHits atomic.Int64
	r.register("healthy.example.com", "h", echo(t, "healthy", &healthyHits).URL, 0, 0, "active")
	seen := sync.Map{}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		backendHits.Add(1)
		b, _ := io.ReadAll(req.Body)
		if _, dup := seen.LoadOrStore(string(b), true); dup {
			t.Errorf("request %s dispatched twice", b)
		}
		w.Write(b)
	}))
	defer backend.Close()

	const n = 200
	results := make(chan string, n)
	for i := range n {
		go func() {
			code, body := r.request("POST", "sleepy.example.com", fmt.Sprintf("req-%d", i))
			results <- fmt.Sprintf("%d %s", code, body)
		}()
	}
	r.waitHeld("sleepy.example.com", n)
	// 200 held, 20 global slots: the healthy hostname still serves.
	if code, _ := r.request("GET", "healthy.example.com", ""); code != 200 {
		t.Fatalf("a healthy hostname got %d while 200 requests were held", code)
	}
	r.clk.Advance(time.Second)
	r.srv.Server.HookTickAt(context.Background(), r.clk.Now())
	r.srv.Server.WaitHookCalls()
	calls := r.rc.got()
	if len(calls) != 1 || calls[0].body["reason"] != "cold_start" || calls[0].body["desired"] != 1.0 {
		t.Fatalf("hook calls for a burst of %d: %+v", n, calls)
	}
	r.register("sleepy.example.com", "c1", backend.URL, 0, 0, "active")
	got := map[string]bool{}
	for range n {
		select {
		case res := <-results:
			got[res] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d requests completed", len(got), n)
		}
	}
	for i := range n {
		if !got[fmt.Sprintf("200 req-%d", i)] {
			var sample []string
			for k := range got {
				if len(sample) < 5 {
					sample = append(sample, k)
				}
			}
			t.Fatalf("request %d did not come back intact; some results: %q", i, sample)
		}
	}
	if backendHits.Load() != n {
		t.Fatalf("backend served %d requests, want %d", backendHits.Load(), n)
	}
}

// When the budget runs out with no client, held requests get 504; no hook
// for the hostname means no hold at all.
func TestEdgeColdStartBudgetExpires(t *testing.T) {
	r := newEdgeRig(t, 0)
	r.mustCall("PUT", "/api/scaling/sleepy.example.com", opKey, `{"url":"`+strings.Replace(r.rc.srv.URL, "127.0.0.1", "hooks.test", 1)+`/scale","max":2,"cold_start":"10s"}`, 201)
	r.srv.Server.RefreshHooks(context.Background())
	results := make(chan int, 3)
	for range 3 {
		go func() { code, _ := r.request("GET", "sleepy.example.com", ""); results <- code }()
	}
	r.waitHeld("sleepy.example.com", 3)
	r.clk.Advance(10 * time.Second)
	for range 3 {
		if code := <-results; code != 504 {
			t.Fatalf("held past the budget: %d, want 504", code)
		}
	}
}

// A draining client gets no new request and finishes the ones it has.
func TestEdgeDrainingClientFinishesInFlight(t *testing.T) {
	r := newEdgeRig(t, 0)
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	var slowHits, otherHits atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		slowHits.Add(1)
		entered <- struct{}{}
		<-release
		io.WriteString(w, "slow done")
	}))
	defer slow.Close()
	r.register("app.example.com", "slow", slow.URL, 10, 0, "active")
	done := make(chan string, 1)
	go func() { _, body := r.request("GET", "app.example.com", ""); done <- body }()
	<-entered
	r.register("app.example.com", "slow", slow.URL, 10, 0, "draining")
	r.register("app.example.com", "other", echo(t, "other", &otherHits).URL, 10, 0, "active")
	for range 3 {
		if _, body := r.request("GET", "app.example.com", ""); !strings.HasPrefix(body, "other") {
			t.Fatalf("a new request went to the draining client: %q", body)
		}
	}
	close(release)
	if body := <-done; body != "slow done" {
		t.Fatalf("the draining client's in-flight request: %q", body)
	}
	if slowHits.Load() != 1 {
		t.Fatalf("draining client served %d requests", slowHits.Load())
	}
}

// A client's limiter queues requests beyond max_concurrent and answers 503
// once its line is full; the permits in use are the hook loop's inflight.
func TestEdgeLimiterIsTheLiveInflight(t *testing.T) {
	r := newEdgeRig(t, 0)
	release := make(chan struct{})
	var entered atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		entered.Add(1)
		<-release
	}))
	defer backend.Close()
	r.register("app.example.com", "c", backend.URL, 2, 0, "active")
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); r.request("GET", "app.example.com", "") }()
	}
	testwait.For(t, "two requests at the client", func() bool { return entered.Load() >= 2 })
	s := r.srv.Server.PoolSample("app.example.com")
	if s.Inflight != 2 || s.Capacity != 2 || s.Current != 1 {
		t.Fatalf("sample %+v, want 2 in flight of capacity 2", s)
	}
	if entered.Load() != 2 {
		t.Fatalf("%d requests reached a client of max_concurrent 2", entered.Load())
	}
	close(release)
	wg.Wait()
	if entered.Load() != 5 {
		t.Fatalf("queued requests were lost: %d of 5 served", entered.Load())
	}
}

// requestFrom sends one request for host through the edge from the local
// address ip (any 127/8 address is this machine's loopback).
func (r *edgeRig) requestFrom(ip, method, host, uri string) (int, http.Header, string) {
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}).DialContext}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(method, r.edge+uri, nil)
	req.Host = host
	resp, err := cl.Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func (r *edgeRig) heartbeat(key, body string) {
	r.t.Helper()
	r.mustCall("POST", "/api/clients/heartbeat", key, body, 200)
}

func (r *edgeRig) armHook(host, budget string) {
	r.t.Helper()
	r.mustCall("PUT", "/api/scaling/"+host, opKey, `{"url":"`+strings.Replace(r.rc.srv.URL, "127.0.0.1", "hooks.test", 1)+`/scale","min":0,"max":2,"cold_start":"`+budget+`"}`, 201)
	if err := r.srv.Server.RefreshHooks(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// tickHooks runs one pass of the hook loop and returns the calls made so far.
func (r *edgeRig) tickHooks() []receivedCall {
	r.clk.Advance(time.Second)
	r.srv.Server.HookTickAt(context.Background(), r.clk.Now())
	r.srv.Server.WaitHookCalls()
	return r.rc.got()
}

// When the budget runs out, a held request gets, in that order of
// availability: the hostname's kept answer (resilience), its fallback
// redirect, a 504.
func TestEdgeBudgetExpiryChain(t *testing.T) {
	r := newEdgeRig(t, 0)
	r.armHook("shop.example.com", "10s")
	var hits atomic.Int64
	backend := echo(t, "shop", &hits)
	beat := func(state, extra string) {
		r.heartbeat(opKey, `{"client_id":"c","hostname":"shop.example.com","target":"`+backend.URL+`","state":"`+state+`"`+extra+`}`)
	}
	beat("active", `,"resilience":true,"fallback":"https://status.example.com/shop"`)
	if code, _, body := r.requestFrom("127.0.0.1", "GET", "shop.example.com", "/menu?day=1"); code != 200 || !strings.HasPrefix(body, "shop GET") {
		t.Fatalf("while the client serves: %d %q", code, body)
	}
	// The client goes: requests are held, then fall through.
	beat("draining", `,"resilience":true,"fallback":"https://status.example.com/shop"`)
	expire := func(uri string) (int, http.Header, string) {
		type res struct {
			code int
			h    http.Header
			body string
		}
		done := make(chan res, 1)
		go func() { c, h, b := r.requestFrom("127.0.0.1", "GET", "shop.example.com", uri); done <- res{c, h, b} }()
		r.waitHeld("shop.example.com", 1)
		r.clk.Advance(10 * time.Second)
		got := <-done
		return got.code, got.h, got.body
	}
	code, h, body := expire("/menu?day=1")
	if code != 200 || !strings.HasPrefix(body, "shop GET shop.example.com /menu?day=1") || h.Get("X-Aperio-Stale") == "" {
		t.Fatalf("kept answer: %d %v %q", code, h, body)
	}
	code, h, _ = expire("/menu?day=2") // never answered: nothing kept
	if code != 302 || h.Get("Location") != "https://status.example.com/shop" {
		t.Fatalf("fallback: %d %v", code, h)
	}
	beat("draining", ``) // no resilience, no fallback any more
	if code, _, body = expire("/menu?day=1"); code != 504 || !strings.Contains(body, "did not start within 10s") {
		t.Fatalf("with nothing to fall back on: %d %q", code, body)
	}
	if hits.Load() != 1 {
		t.Fatalf("the client served %d requests, want 1", hits.Load())
	}
}

// Maintenance mode, a visitor outside the owning key's allowed_ips and a
// disarmed record answer at once and never call the hook.
func TestEdgeNoCallForMaintenanceBlockedOrDisarmed(t *testing.T) {
	r := newEdgeRig(t, 0)
	r.armHook("down.example.com", "30s")
	r.heartbeat(opKey, `{"client_id":"c","hostname":"down.example.com","state":"draining","maintenance":true}`)
	if code, _, body := r.requestFrom("127.0.0.1", "GET", "down.example.com", "/"); code != 503 || !strings.Contains(body, "down for maintenance") {
		t.Fatalf("maintenance: %d %q", code, body)
	}

	// A client key that may be used from 127.0.0.1 only: its hostnames take
	// visitors from there only, checked before anything else.
	clientKey := r.newKey(api.CreateKeyRequest{Name: "edge", Org: "acme", Kind: "client", AllowedIPs: []string{"127.0.0.1/32"}})
	r.mustCall("PUT", "/api/scaling/private.example.com", r.newKey(api.CreateKeyRequest{Name: "adm", Org: "acme", Kind: "admin", AllowedIPs: []string{"127.0.0.1/32"}}),
		`{"url":"`+strings.Replace(r.rc.srv.URL, "127.0.0.1", "hooks.test", 1)+`/scale","max":2,"cold_start":"30s"}`, 201)
	r.srv.Server.RefreshHooks(context.Background())
	// No client has heartbeated yet: the keys that armed the record decide.
	if code, _, body := r.requestFrom("127.0.0.2", "GET", "private.example.com", "/"); code != 403 || strings.Contains(body, "private.example.com") {
		t.Fatalf("blocked visitor, record's keys: %d %q", code, body)
	}
	r.heartbeat(clientKey, `{"client_id":"c","hostname":"private.example.com","state":"draining"}`)
	if code, _, _ := r.requestFrom("127.0.0.2", "GET", "private.example.com", "/"); code != 403 {
		t.Fatalf("blocked visitor, client's key: %d", code)
	}

	// The breaker disarms a record after five failed calls; it holds and
	// calls no more.
	r.armHook("broken.example.com", "30s")
	r.rc.mu.Lock()
	r.rc.status = 500
	r.rc.mu.Unlock()
	for i := range 5 {
		done := make(chan int, 1)
		go func() { c, _, _ := r.requestFrom("127.0.0.1", "GET", "broken.example.com", "/"); done <- c }()
		r.waitHeld("broken.example.com", 1)
		r.srv.Server.HookTickAt(context.Background(), r.clk.Now())
		r.srv.Server.WaitHookCalls()
		r.clk.Advance(time.Minute) // past the budget and any backoff
		if c := <-done; c != 504 {
			t.Fatalf("held request %d: %d", i, c)
		}
	}
	if n := len(r.rc.got()); n != 5 {
		t.Fatalf("%d calls before the breaker, want 5", n)
	}
	r.srv.Server.RefreshHooks(context.Background())
	if code, _, _ := r.requestFrom("127.0.0.1", "GET", "broken.example.com", "/"); code != 502 {
		t.Fatalf("disarmed record: %d, want 502 at once", code)
	}
	if n := r.srv.Server.HeldRequests("broken.example.com"); n != 0 {
		t.Fatalf("%d requests held for a disarmed record", n)
	}
	// Nothing above was held long enough to call, except the five.
	if calls := r.tickHooks(); len(calls) != 5 {
		t.Fatalf("%d hook calls, want the 5 before the breaker: %+v", len(calls), calls)
	}
	for _, c := range r.rc.got() {
		if c.body["hostname"] != "broken.example.com" {
			t.Fatalf("a call for %v", c.body["hostname"])
		}
	}
}

// The edge probes a client's probe_path: a failing client gets no requests
// and is not capacity; passing again makes it routable and wakes the
// requests held meanwhile. Standby clients serve but are never capacity.
func TestEdgeProbeAndStandbyCapacity(t *testing.T) {
	r := newEdgeRig(t, 0)
	r.armHook("probed.example.com", "30s")
	var healthy atomic.Bool
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/base/healthz" {
			if !healthy.Load() {
				w.WriteHeader(500)
			}
			return
		}
		io.WriteString(w, "served "+req.URL.Path)
	}))
	defer backend.Close()
	r.heartbeat(opKey, `{"client_id":"c","hostname":"probed.example.com","target":"`+backend.URL+`/base","max_concurrent":4,"probe_path":"/healthz"}`)
	r.srv.Server.ProbeClients(context.Background())
	if s := r.srv.Server.PoolSample("probed.example.com"); s.Current != 0 || s.Capacity != 0 {
		t.Fatalf("a client failing its probe counts: %+v", s)
	}
	done := make(chan string, 1)
	go func() { _, _, b := r.requestFrom("127.0.0.1", "GET", "probed.example.com", "/x"); done <- b }()
	r.waitHeld("probed.example.com", 1)
	healthy.Store(true)
	r.srv.Server.ProbeClients(context.Background())
	if body := <-done; body != "served /base/x" {
		t.Fatalf("held request after the probe passed: %q", body)
	}
	if s := r.srv.Server.PoolSample("probed.example.com"); s.Current != 1 || s.Capacity != 4 {
		t.Fatalf("a passing client: %+v", s)
	}
	// A standby client serves nothing while the primary is up, and is
	// never capacity.
	r.heartbeat(opKey, `{"client_id":"s","hostname":"probed.example.com","target":"`+backend.URL+`","max_concurrent":50,"priority":1}`)
	if s := r.srv.Server.PoolSample("probed.example.com"); s.Current != 1 || s.Capacity != 4 || s.RoutableAnyTier != 2 {
		t.Fatalf("with a standby: %+v", s)
	}
	healthy.Store(false)
	r.srv.Server.ProbeClients(context.Background())
	if s := r.srv.Server.PoolSample("probed.example.com"); s.Current != 0 || s.Capacity != 0 || s.RoutableAnyTier != 1 {
		t.Fatalf("only the standby left: %+v", s)
	}
	if _, _, body := r.requestFrom("127.0.0.1", "GET", "probed.example.com", "/y"); body != "served /y" {
		t.Fatalf("the standby serves when no primary is routable: %q", body)
	}
}
