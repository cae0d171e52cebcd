package apiserver_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
)

type edgeRig struct {
	*harness
	clk  *clock.Fake
	edge *httptest.Server
	rc   *receiver
}

func newEdgeRig(t *testing.T, slots int) *edgeRig {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(minuteStart)
	h := newHarness(t, apiservertest.Options{Aperio: &a, Resolver: hookDNS{"hooks.test": "127.0.0.1"}, Clock: clk, EdgeSlots: slots})
	e := httptest.NewServer(h.srv.Server.EdgeHandler())
	t.Cleanup(e.Close)
	// Whatever happened, no request stays held past the test: spend every
	// budget before the edge closes (cleanups run last-in first-out).
	t.Cleanup(func() { clk.Advance(24 * time.Hour) })
	return &edgeRig{harness: h, clk: clk, edge: e, rc: newReceiver(t)}
}

// request sends one request for host through the edge.
func (r *edgeRig) request(method, host, body string) (int, string) {
	req, _ := http.NewRequest(method, r.edge.URL+"/path?q=1", strings.NewReader(body))
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
	deadline := time.Now().Add(20 * time.Second)
	for r.srv.Server.HeldRequests(host) < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("%d of %d requests held", r.srv.Server.HeldRequests(host), n)
		}
		runtime.Gosched()
	}
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
	deadline := time.Now().Add(10 * time.Second)
	for entered.Load() < 2 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
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
