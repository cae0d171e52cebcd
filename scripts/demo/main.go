// Command demo runs the Aperio half end to end on this machine: the API
// server with its edge, a tiny backend, a local scale receiver that starts
// and stops reference clients (autoscaled client) when the server calls it,
// and generated traffic. The terminal shows a cold start, scale out under
// load, and scale in once the traffic stops, down to zero, with the live
// pool from GET /api/scaling. Run by `make demo`; it exits 1 if any of the
// three did not happen.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const hostname = "demo.localhost"

func main() {
	bin := flag.String("bin", "bin/autoscaled", "the autoscaled binary")
	api := flag.String("api", "127.0.0.1:20900", "where the API server listens")
	edge := flag.String("edge", "127.0.0.1:20980", "where the edge listens")
	workers := flag.Int("workers", 10, "concurrent visitors during the load phase")
	loadFor := flag.Duration("load", 30*time.Second, "how long the load phase lasts")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *api, *edge, *workers, *loadFor); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type demo struct {
	bin, apiURL, edgeURL, key, work string
	start                           time.Time
	backendURL                      string

	mu      sync.Mutex
	clients []*exec.Cmd // running reference clients, oldest first
	next    int
	seen    map[string]bool // idempotency keys already acted on
	reasons map[string]int
	peak    int
}

func (d *demo) say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, bin, apiAddr, edgeAddr string, workers int, loadFor time.Duration) error {
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s: %w (make demo builds it)", bin, err)
	}
	abs, _ := filepath.Abs(bin)
	work, err := os.MkdirTemp("", "aperio-demo")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	d := &demo{bin: abs, apiURL: "http://" + apiAddr, edgeURL: "http://" + edgeAddr, work: work, start: time.Now(),
		key: fmt.Sprintf("demo-%d", time.Now().UnixNano()), seen: map[string]bool{}, reasons: map[string]int{}}

	// The backend: every answer takes 100 ms, so ten visitors keep about
	// ten requests in flight.
	backend, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(100 * time.Millisecond):
		case <-r.Context().Done():
		}
		io.WriteString(w, "hello from the backend\n")
	}))
	if err != nil {
		return err
	}
	d.backendURL = backend
	receiver, err := serve(http.HandlerFunc(d.scale))
	if err != nil {
		return err
	}
	// The fence refuses numeric hosts: the hook is called by name.
	hookURL := strings.Replace(receiver, "127.0.0.1", "localhost", 1) + "/scale"

	d.say("starting the API server on %s, edge on %s (log: %s/server.log)", apiAddr, edgeAddr, work)
	logf, err := os.Create(filepath.Join(work, "server.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	server := exec.Command(abs, "serve", "--listen", apiAddr, "--database-url", filepath.Join(work, "demo.db"))
	server.Dir = work
	server.Env = append(os.Environ(), "QOD_API_KEY="+d.key, "APERIO_EDGE_LISTEN_ADDR="+edgeAddr,
		"APERIO_SCALING=1", "APERIO_SCALING_ALLOW_HTTP=1", "APERIO_SCALING_ALLOW_PRIVATE=1")
	server.Stdout, server.Stderr = logf, logf
	if err := server.Start(); err != nil {
		return err
	}
	defer func() {
		server.Process.Signal(syscall.SIGTERM)
		server.Wait()
	}()
	defer d.stopAll()
	if err := d.waitReady(ctx); err != nil {
		return err
	}

	decl := fmt.Sprintf(`{"url":%q,"min":0,"max":4,"cold_start":"30s","target_utilization":0.7,"window":"3s","cooldown":"5s","idle_timeout":"45s","max_concurrent":4}`, hookURL)
	d.say("declaring the scaling hook of %s (as Terraform's aperio_scaling_hook would):\n          %s", hostname, decl)
	if _, err := d.call(ctx, "PUT", "/api/scaling/"+hostname, decl); err != nil {
		return err
	}
	d.say("nothing is running for %s: min is 0", hostname)

	status, stopStatus := context.WithCancel(ctx)
	defer stopStatus()
	go d.report(status)

	// 1. Cold start: one visitor, held until a client is up.
	d.say("--- cold start: one visitor arrives at a sleeping hostname")
	t0 := time.Now()
	code, body, err := d.visit(ctx)
	if err != nil || code != 200 {
		return fmt.Errorf("the first visitor got %d %q: %v", code, body, err)
	}
	coldStart := time.Since(t0)
	d.say("the first visitor got %d %q after %s: held, not failed, while the hook started a client", code, strings.TrimSpace(body), coldStart.Round(time.Millisecond))

	// 2. Load: many visitors at once; the pool saturates and grows.
	d.say("--- load: %d visitors for %s (each instance takes max_concurrent 4)", workers, loadFor)
	var served, failed atomic.Int64
	loadCtx, stopLoad := context.WithTimeout(ctx, loadFor)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				if code, _, err := d.visit(loadCtx); err == nil && code == 200 {
					served.Add(1)
				} else if loadCtx.Err() == nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	stopLoad()
	d.say("load over: %d requests served, %d failed", served.Load(), failed.Load())

	// 3. Quiet: the idle clock gives instances back one at a time, and the
	// last client retires itself after idle_timeout.
	d.say("--- quiet: no visitors; the loop scales in, the last client retires after its idle_timeout")
	deadline := time.After(3 * time.Minute)
	for d.running() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%d clients still running three minutes after the traffic stopped", d.running())
		case <-time.After(500 * time.Millisecond):
		}
	}
	d.say("every client is gone: %s is asleep again", hostname)
	stopStatus()

	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("\nsummary: cold start %s; hook calls %v; at most %d instances; served %d under load\n",
		coldStart.Round(time.Millisecond), d.reasons, d.peak, served.Load())
	if d.reasons["cold_start"] == 0 || d.reasons["scale_out"] == 0 || d.reasons["scale_in"] == 0 {
		return errors.New("the demo did not see a cold start, a scale out and a scale in")
	}
	return nil
}

// serve starts h on a free loopback port and returns its URL.
func serve(h http.Handler) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go http.Serve(ln, h)
	return "http://" + ln.Addr().String(), nil
}

func (d *demo) waitReady(ctx context.Context) error {
	for i := 0; i < 100; i++ {
		resp, err := http.Get(d.apiURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	log, _ := os.ReadFile(filepath.Join(d.work, "server.log"))
	return fmt.Errorf("the server did not become ready on %s; its log:\n%s", d.apiURL, log)
}

func (d *demo) call(ctx context.Context, method, path, body string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, d.apiURL+path, strings.NewReader(body))
	req.Header.Set("X-API-Key", d.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

var visitor = &http.Client{Timeout: 60 * time.Second}

func (d *demo) visit(ctx context.Context) (int, string, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", d.edgeURL+"/", nil)
	req.Host = hostname
	resp, err := visitor.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// scale is the scale receiver: it brings the running clients to desired,
// starting new ones or stopping the newest (which drain first).
func (d *demo) scale(w http.ResponseWriter, r *http.Request) {
	var call struct {
		Reason           string `json:"reason"`
		Current, Desired int
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&call); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// The same decision may arrive twice; act once.
	if k := r.Header.Get("Idempotency-Key"); k != "" {
		if d.seen[k] {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		d.seen[k] = true
	}
	d.reasons[call.Reason]++
	var did []string
	for len(d.clients) < call.Desired {
		d.next++
		id := fmt.Sprintf("demo-%d", d.next)
		if err := d.startClient(id); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		did = append(did, "started "+id)
	}
	for len(d.clients) > call.Desired && len(d.clients) > 0 {
		c := d.clients[len(d.clients)-1]
		d.clients = d.clients[:len(d.clients)-1]
		c.Process.Signal(syscall.SIGTERM) // it drains, then exits
		did = append(did, "stopping "+clientID(c))
	}
	d.peak = max(d.peak, len(d.clients))
	d.say("hook call: %-10s current=%d desired=%d -> %s", call.Reason, call.Current, call.Desired, strings.Join(did, ", "))
	w.WriteHeader(http.StatusAccepted)
}

func clientID(c *exec.Cmd) string {
	for _, e := range c.Env {
		if v, ok := strings.CutPrefix(e, "APERIO_CLIENT_ID="); ok {
			return v
		}
	}
	return "?"
}

// startClient starts one reference client; it is forgotten when it exits
// (retired after idle_timeout, or stopped).
func (d *demo) startClient(id string) error {
	logf, err := os.Create(filepath.Join(d.work, id+".log"))
	if err != nil {
		return err
	}
	c := exec.Command(d.bin, "client")
	c.Env = append(os.Environ(), "APERIO_SERVER_URL="+d.apiURL, "APERIO_SERVER_TOKEN="+d.key, "APERIO_HOSTNAME="+hostname,
		"APERIO_TARGET="+d.backendURL, "APERIO_CLIENT_ID="+id, "APERIO_MAX_CONCURRENT=4", "APERIO_IDLE_TIMEOUT=45s",
		"APERIO_HEARTBEAT_INTERVAL=2s", "APERIO_PROBE_PATH=/")
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		logf.Close()
		return err
	}
	d.clients = append(d.clients, c)
	go func() {
		c.Wait()
		logf.Close()
		d.mu.Lock()
		for i, x := range d.clients {
			if x == c {
				d.clients = append(d.clients[:i], d.clients[i+1:]...)
				d.say("client %s exited by itself (idle_timeout: nothing arrived)", id)
				break
			}
		}
		d.mu.Unlock()
	}()
	return nil
}

func (d *demo) running() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.clients)
}

func (d *demo) stopAll() {
	d.mu.Lock()
	cs := append([]*exec.Cmd(nil), d.clients...)
	d.mu.Unlock()
	for _, c := range cs {
		c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range cs {
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			c.Process.Kill()
		}
	}
}

// report prints the live pool from GET /api/scaling every two seconds,
// when it changed.
func (d *demo) report(ctx context.Context) {
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
		b, err := d.call(ctx, "GET", "/api/scaling", "")
		if err != nil {
			continue
		}
		var list struct {
			Records []struct {
				Hostname string `json:"hostname"`
				Armed    bool   `json:"armed"`
				Pool     *struct {
					Instances, Capacity, Inflight int
					Utilization                   *float64
				} `json:"pool"`
			} `json:"records"`
		}
		if json.Unmarshal(b, &list) != nil {
			continue
		}
		sort.Slice(list.Records, func(i, j int) bool { return list.Records[i].Hostname < list.Records[j].Hostname })
		for _, r := range list.Records {
			if p := r.Pool; p != nil {
				u := "-"
				if p.Utilization != nil {
					u = fmt.Sprintf("%.2f", *p.Utilization)
				}
				line := fmt.Sprintf("GET /api/scaling  %s: instances=%d %-4s capacity=%-2d inflight=%-2d utilization=%s",
					r.Hostname, p.Instances, strings.Repeat("#", p.Instances), p.Capacity, p.Inflight, u)
				if line != last {
					d.say("%s", line)
					last = line
				}
			}
		}
	}
}
