package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// armedHooks arms every hostname with a long budget.
type armedHooks struct{}

func (armedHooks) Hook(string) HookInfo { return HookInfo{Armed: true, Budget: time.Hour} }

// BenchmarkHold1000 holds 1000 requests for a sleeping hostname on real
// connections, then registers a client and measures, per request, the time
// from the client becoming routable to the request leaving its hold
// (wake-p99-ms) and to its answer reaching the visitor (answer-p99-ms);
// held-B is the memory (live heap and stacks) per held request, the
// visitor's side of each connection included. With max_concurrent 0 every
// woken request dials its own connection to the client at once; with 16,
// all but 16 line up on the client's limiter.
func BenchmarkHold1000(b *testing.B) {
	for _, mc := range []int{0, 16} {
		b.Run(fmt.Sprintf("max_concurrent=%d", mc), func(b *testing.B) { benchHold(b, mc) })
	}
}

func benchHold(b *testing.B, maxConcurrent int) {
	const n = 1000
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)
	var wakeP99, answerP99, heldBytes []float64
	baseline := runtime.NumGoroutine()
	for b.Loop() {
		b.StopTimer()
		pools := NewPools(time.Hour, n)
		var mu sync.Mutex
		var woke []time.Time
		p := NewProxy(Options{Pools: pools, Hooks: armedHooks{}, MaxPending: n, OnHeld: func(string, time.Duration) {
			t := time.Now()
			mu.Lock()
			woke = append(woke, t)
			mu.Unlock()
		}})
		edge := serveH1(b, p)
		conns := make([]net.Conn, n)
		// The last round's connections end asynchronously: wait for their
		// goroutines to go before measuring.
		for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > baseline+8 && time.Now().Before(deadline); {
			runtime.Gosched()
		}
		runtime.GC()
		runtime.GC() // twice: buffers parked in sync.Pools outlive one
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range conns {
			c, err := net.Dial("tcp", edge.Listener.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: sleepy.test\r\n\r\n")
			conns[i] = c
		}
		for pools.Held("sleepy.test") < n {
			runtime.Gosched()
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if testing.Verbose() {
			b.Logf("per held request: heap %d B, stacks %d B, goroutines %d", (int64(after.HeapAlloc)-int64(before.HeapAlloc))/n,
				(int64(after.StackInuse)-int64(before.StackInuse))/n, runtime.NumGoroutine())
		}
		heldBytes = append(heldBytes, float64(int64(after.HeapAlloc+after.StackInuse)-int64(before.HeapAlloc+before.StackInuse))/n)
		// The visitors wait for their answers before the client comes up,
		// so that starting them is not counted.
		answered := make([]time.Duration, n)
		var t0 time.Time
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, c := range conns {
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReader(c)
				br.Peek(1)
				<-start
				resp, err := http.ReadResponse(br, nil)
				if err != nil || resp.StatusCode != 200 {
					b.Errorf("held request %d: %v", i, err)
					return
				}
				answered[i] = time.Since(t0)
				c.Close()
			}()
		}
		b.StartTimer()
		t0 = time.Now()
		close(start)
		pools.Heartbeat("sleepy.test", "c", ClientInfo{Target: target, State: Active, ProbeOK: true, MaxConcurrent: maxConcurrent}, HostSettings{}, time.Now())
		wg.Wait()
		b.StopTimer()
		mu.Lock()
		wakes := make([]time.Duration, len(woke))
		for i, t := range woke {
			wakes[i] = t.Sub(t0)
		}
		mu.Unlock()
		wakeP99 = append(wakeP99, ms(p99(wakes)))
		answerP99 = append(answerP99, ms(p99(answered)))
		edge.Close()
		// Close this round's connections to the client, so that the next
		// round's memory is its own.
		if c, _ := pools.Pick("sleepy.test", time.Now()); c != nil {
			c.idle.closeAll()
		}
		backend.CloseClientConnections()
		b.StartTimer()
	}
	b.ReportMetric(median(wakeP99), "wake-p99-ms")
	b.ReportMetric(median(answerP99), "answer-p99-ms")
	b.ReportMetric(median(heldBytes), "held-B")
}

func p99(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)*99/100-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(x []float64) float64 {
	slices.Sort(x)
	return x[len(x)/2]
}
