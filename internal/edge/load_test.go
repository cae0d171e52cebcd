package edge

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
)

// armedFor arms one hostname with an hour of budget.
type armedFor string

func (a armedFor) Hook(host string) HookInfo {
	if host == string(a) {
		return HookInfo{Armed: true, Budget: time.Hour}
	}
	return HookInfo{}
}

// Under concurrent load (run with -race by make test): requests through
// three clients with small limits while their heartbeats flap, probes run,
// the hook loop samples, and a burst held for a sleeping hostname is
// released; every request is answered once with its own body, and no
// permit is left in use.
func TestEdgeUnderConcurrentLoad(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	pools := NewPools(time.Hour, 10_000)
	p := NewProxy(Options{Pools: pools, Hooks: armedFor("sleepy.test"), Clock: clk, GlobalSlots: 64})
	edge := serveH1(t, p)
	defer edge.Close()
	defer clk.Advance(2 * time.Hour) // on failure, release the held before closing
	var served atomic.Int64
	backends := make([]*url.URL, 3)
	for i := range backends {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			served.Add(1)
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, r.URL.Path)
			w.Write(b)
		}))
		defer s.Close()
		backends[i], _ = url.Parse(s.URL)
	}
	beat := func(host string, i int, state string) {
		pools.Heartbeat(host, fmt.Sprint("c", i), ClientInfo{Target: backends[i], MaxConcurrent: 4, State: state, ProbeOK: true, ProbePath: "/"}, HostSettings{}, clk.Now())
	}
	for i := range backends {
		beat("busy.test", i, Active)
	}
	// send POSTs body to /, or GETs /body when get; the backend echoes the
	// path and the body.
	send := func(host, body string, get bool) error {
		req, _ := http.NewRequest("POST", edge.URL+"/", strings.NewReader(body))
		want := "/" + body
		if get {
			req, _ = http.NewRequest("GET", edge.URL+"/"+body, nil)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(got) != want {
			return fmt.Errorf("%d %q, want 200 %q", resp.StatusCode, got, want)
		}
		return nil
	}

	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() { // heartbeats flap, probes run, the loop samples
		defer churn.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			state := Active
			if n%2 == 1 {
				state = Draining
			}
			beat("busy.test", 2, state)
			pools.Probe(context.Background(), clk.Now())
			pools.Sample("busy.test", clk.Now())
			pools.Sample("sleepy.test", clk.Now())
		}
	}()

	const held = 100
	errs := make(chan error, 200*10+held)
	var wg sync.WaitGroup
	for g := range held {
		wg.Add(1)
		// Half without a body (parked, their connections taken over), half
		// with one (held on their goroutines).
		go func() { defer wg.Done(); errs <- send("sleepy.test", fmt.Sprint("held-", g), g%2 == 0) }()
	}
	for g := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				errs <- send("busy.test", fmt.Sprintf("g%d-r%d-%s", g, i, strings.Repeat("x", g*i%3000)), i%3 == 0)
			}
		}()
	}
	var early []error
	for pools.Held("sleepy.test") < held {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatalf("before the sleeping hostname woke: %v", err)
			}
			early = append(early, err)
		default:
			runtime.Gosched()
		}
	}
	beat("sleepy.test", 0, Active) // wakes the held burst
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errs)
	if len(early)+len(errs) != 200*10+held {
		t.Fatalf("%d answers, want %d", len(early)+len(errs), 200*10+held)
	}
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := served.Load(); n < 200*10+held {
		t.Fatalf("backends served %d requests, want at least %d", n, 200*10+held)
	}
	for _, host := range []string{"busy.test", "sleepy.test"} {
		if s := pools.Sample(host, clk.Now()); s.Inflight != 0 || s.Waiting != 0 {
			t.Fatalf("%s after the load: %+v", host, s)
		}
	}
}
