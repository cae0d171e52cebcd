package refclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/apiserver/apiservertest"
	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/config"
	"github.com/qodaperio/autoscale/internal/refclient"
	"github.com/qodaperio/autoscale/internal/store"
	"github.com/qodaperio/autoscale/internal/testwait"
)

type loopbackDNS struct{}

func (loopbackDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "hooks.test" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, errors.New("no such host")
}

type world struct {
	t     *testing.T
	clk   *clock.Fake
	inst  *apiservertest.Instance
	edge  string // the edge's base URL
	calls chan map[string]string
}

func newWorld(t *testing.T) *world {
	a := config.DefaultAperio()
	a.Scaling, a.ScalingAllowHTTP, a.ScalingAllowPrivate = true, true, true
	clk := clock.NewFake(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	inst, err := apiservertest.Start(apiservertest.Options{Aperio: &a, Resolver: loopbackDNS{}, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.Close)
	edge, err := inst.StartEdge()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clk.Advance(24 * time.Hour) }) // no hold outlives the test
	return &world{t: t, clk: clk, inst: inst, edge: edge, calls: make(chan map[string]string, 16)}
}

func (w *world) get(host, path string) (int, string) {
	req, _ := http.NewRequest("GET", w.edge+path, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// until yields until cond holds (testwait.For).
func (w *world) until(what string, cond func() bool) {
	w.t.Helper()
	testwait.For(w.t, what, cond)
}

// tick moves the fake clock one second once the client waits on it.
func (w *world) tick(done <-chan error) bool {
	w.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for w.clk.Waiters() == 0 {
		select {
		case err := <-done:
			w.t.Fatalf("the client stopped early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			w.t.Fatal("the client never waited on the clock")
		}
		runtime.Gosched()
	}
	w.clk.Advance(time.Second)
	return true
}

func backend(t *testing.T, slow <-chan struct{}, entered chan<- struct{}) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-slow
		}
		fmt.Fprintf(w, "backend %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s
}

// The client serves its hostname through the edge, announces its scaling
// block (an environment variable overriding one field of the file's), and
// retires after idle_timeout with nothing arriving; the next request then
// cold-starts through the hook.
func TestClientServesAnnouncesAndRetires(t *testing.T) {
	w := newWorld(t)
	var mu sync.Mutex
	var calls []string
	receiver := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		calls = append(calls, string(b))
		mu.Unlock()
		rw.WriteHeader(202)
	}))
	defer receiver.Close()
	be := backend(t, nil, nil)
	f, err := config.ParseFile("aperio.yaml", []byte(fmt.Sprintf(`
server: {url: %s, token: %s}
services:
  - {hostname: shop.localhost, target: %s}
scaling: {url: %q, min: 0, max: 2, cold_start: 30s}
idle_timeout: 5m
max_concurrent: 4
`, w.inst.URL, apiservertest.OperatorKey, be.URL, strings.Replace(receiver.URL, "127.0.0.1", "hooks.test", 1)+"/scale")))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := refclient.Load(f, func(k string) string { return map[string]string{"APERIO_SCALING_MAX": "3"}[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- refclient.Run(ctx, cfg, w.clk, slog.New(slog.NewTextHandler(testWriter{t}, nil)), nil) }()
	w.until("the client to register", func() bool { return w.inst.Server.PoolSample("shop.localhost").Current == 1 })
	if s := w.inst.Server.PoolSample("shop.localhost"); s.Capacity != 4 {
		t.Fatalf("sample %+v", s)
	}
	if code, body := w.get("shop.localhost", "/menu"); code != 200 || body != "backend shop.localhost /menu" {
		t.Fatalf("%d %q", code, body)
	}
	var rec *store.ScalingRecord
	// The heartbeat registers the client, then stores the announcement.
	w.until("the announcement to be stored", func() bool { rec, err = w.inst.Store.GetScaling(ctx, "shop.localhost"); return err == nil })
	if d := rec.Declaration; rec.Source != "heartbeat" || *d.Max != 3 || *d.Min != 0 || d.ColdStart != "30s" || d.IdleTimeout != "5m0s" || *d.MaxConcurrent != 4 {
		t.Fatalf("announced %+v from %s", d, rec.Source)
	}
	// Two minutes in, a request: the idle clock starts again from there.
	for range 120 {
		w.tick(done)
	}
	if code, body := w.get("shop.localhost", "/again"); code != 200 {
		t.Fatalf("two minutes in: %d %q", code, body)
	}
	for range 299 {
		w.tick(done)
	}
	select {
	case err := <-done:
		t.Fatalf("retired before idle_timeout since the last request: %v", err)
	default:
	}
	w.tick(done) // five minutes since the last request
	if err := <-done; !errors.Is(err, refclient.Retired) {
		t.Fatalf("Run: %v, want it retired", err)
	}
	if s := w.inst.Server.PoolSample("shop.localhost"); s.RoutableAnyTier != 0 {
		t.Fatalf("a retired client is still routable: %+v", s)
	}
	// The hostname is asleep: the next visitor is held, and the hook is
	// called to start it.
	if err := w.inst.Server.RefreshHooks(ctx); err != nil {
		t.Fatal(err)
	}
	got := make(chan int, 1)
	go func() { code, _ := w.get("shop.localhost", "/wake"); got <- code }()
	w.until("the visitor to be held", func() bool { return w.inst.Server.HeldRequests("shop.localhost") == 1 })
	w.inst.Server.HookTickAt(ctx, w.clk.Now())
	w.inst.Server.WaitHookCalls()
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 1 || !strings.Contains(calls[0], `"reason":"cold_start"`) || !strings.Contains(calls[0], `"desired":1`) {
		t.Fatalf("hook calls: %q", calls)
	}
}

// Told to stop, the client drains: the edge sends it nothing new, and the
// request it was serving completes.
func TestClientDrainsBeforeStopping(t *testing.T) {
	w := newWorld(t)
	slow, entered := make(chan struct{}), make(chan struct{}, 1)
	be := backend(t, slow, entered)
	cfg, _, err := refclient.Load(nil, func(k string) string {
		return map[string]string{"APERIO_SERVER_URL": w.inst.URL, "APERIO_SERVER_TOKEN": apiservertest.OperatorKey,
			"APERIO_HOSTNAME": "api.localhost", "APERIO_TARGET": be.URL, "APERIO_MAX_CONCURRENT": "2"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- refclient.Run(ctx, cfg, w.clk, slog.New(slog.DiscardHandler), nil) }()
	w.until("the client to register", func() bool { return w.inst.Server.PoolSample("api.localhost").Current == 1 })
	slowDone := make(chan string, 1)
	go func() { code, body := w.get("api.localhost", "/slow"); slowDone <- fmt.Sprint(code, " ", body) }()
	<-entered
	cancel()
	w.until("the client to drain", func() bool { return w.inst.Server.PoolSample("api.localhost").RoutableAnyTier == 0 })
	if code, _ := w.get("api.localhost", "/new"); code != 502 {
		t.Fatalf("a new request while the only client drains: %d, want 502", code)
	}
	select {
	case err := <-done:
		t.Fatalf("stopped with a request in flight: %v", err)
	default:
	}
	close(slow)
	if got := <-slowDone; got != "200 backend api.localhost /slow" {
		t.Fatalf("the in-flight request: %q", got)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// testWriter sends the client's log to the test's.
type testWriter struct{ t *testing.T }

func (tw testWriter) Write(p []byte) (int, error) {
	tw.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
