package refclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/edge"
)

// Client is a running reference client.
type Client struct {
	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	api    *http.Client
	target string // where the edge reaches this client

	mu          sync.Mutex
	inflight    int
	lastArrival time.Time
	drained     chan struct{} // closed when inflight drops to 0 while draining
	draining    bool
	announced   string // the last announce outcome logged
}

// Retired is returned by Run when the client retired itself after
// idle_timeout.
var Retired = errors.New("retired: nothing arrived for idle_timeout")

// Run serves the hostname until ctx ends or the client retires after
// idle_timeout; either way it drains first: it tells the server it is
// draining (the edge sends it nothing new), waits for its in-flight requests
// (at most drain_timeout), then says it is disabled and stops. ready, when
// set, learns the URL the edge reaches the client at.
func Run(ctx context.Context, cfg Config, clk clock.Clock, log *slog.Logger, ready func(target string)) error {
	if clk == nil {
		clk = clock.Real{}
	}
	backend, err := url.Parse(cfg.Target)
	if err != nil {
		return fmt.Errorf("target: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (listen / APERIO_LISTEN): %w", cfg.Listen, err)
	}
	c := &Client{cfg: cfg, clk: clk, log: log, target: "http://" + ln.Addr().String(), lastArrival: clk.Now(),
		api: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(backend)
			pr.Out.Host = pr.In.Host
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			log.Warn("client: the backend failed", "err", err)
			http.Error(w, "the backend behind this client failed to answer", http.StatusBadGateway)
		},
	}
	srv := &http.Server{Handler: c.count(rp), ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("client serving", "hostname", cfg.Hostname, "target", c.target, "backend", cfg.Target, "client_id", cfg.ClientID)
	if ready != nil {
		ready(c.target)
	}

	if err := c.heartbeat(ctx, "active"); err != nil {
		srv.Close()
		return err
	}
	nextBeat := clk.Now().Add(cfg.HeartbeatInterval)
	why := error(nil)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-serveErr:
			return fmt.Errorf("serving: %w", err)
		case now := <-clk.After(time.Second):
			if cfg.IdleTimeout > 0 && c.idleFor(now) >= cfg.IdleTimeout {
				why = Retired
				log.Info("client retiring: nothing arrived", "idle_timeout", cfg.IdleTimeout)
				break loop
			}
			if !now.Before(nextBeat) {
				nextBeat = now.Add(cfg.HeartbeatInterval)
				if err := c.heartbeat(ctx, "active"); err != nil {
					srv.Close()
					return err
				}
			}
		}
	}
	c.drain(srv)
	return why
}

// count tracks in-flight requests and the last arrival, for idle_timeout
// and draining.
func (c *Client) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(edge.ProbeHeader) != "" {
			next.ServeHTTP(w, r) // the edge checking the backend is not a visitor
			return
		}
		c.mu.Lock()
		c.inflight++
		c.lastArrival = c.clk.Now()
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.inflight--
			c.lastArrival = c.clk.Now()
			if c.inflight == 0 && c.drained != nil {
				close(c.drained)
				c.drained = nil
			}
			c.mu.Unlock()
		}()
		next.ServeHTTP(w, r)
	})
}

// idleFor is how long nothing has arrived and nothing has been in flight.
func (c *Client) idleFor(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inflight > 0 {
		return 0
	}
	return now.Sub(c.lastArrival)
}

// Inflight is the requests the client is serving now.
func (c *Client) Inflight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight
}

func (c *Client) drain(srv *http.Server) {
	bg := context.Background()
	if err := c.heartbeat(bg, "draining"); err != nil {
		c.log.Warn("client: could not announce draining; the edge forgets this client when its heartbeat expires", "err", err)
	}
	c.mu.Lock()
	var wait chan struct{}
	if c.inflight > 0 {
		wait = make(chan struct{})
		c.drained = wait
	}
	n := c.inflight
	c.mu.Unlock()
	if wait != nil {
		c.log.Info("client draining", "in_flight", n, "drain_timeout", c.cfg.DrainTimeout)
		select {
		case <-wait:
		case <-c.clk.After(c.cfg.DrainTimeout):
			c.log.Warn("client: drain_timeout passed with requests still in flight", "in_flight", c.Inflight())
		}
	}
	if err := c.heartbeat(bg, "disabled"); err != nil {
		c.log.Warn("client: could not announce leaving", "err", err)
	}
	srv.Close()
	c.log.Info("client stopped", "hostname", c.cfg.Hostname, "client_id", c.cfg.ClientID)
}

type heartbeatBody struct {
	ClientID      string   `json:"client_id"`
	Hostname      string   `json:"hostname"`
	Target        string   `json:"target"`
	MaxConcurrent int      `json:"max_concurrent"`
	Priority      int      `json:"priority"`
	State         string   `json:"state"`
	ProbePath     string   `json:"probe_path,omitempty"`
	Maintenance   bool     `json:"maintenance"`
	Resilience    bool     `json:"resilience"`
	Fallback      string   `json:"fallback,omitempty"`
	Scaling       *Scaling `json:"scaling,omitempty"`
}

// heartbeat tells the server this client's state. A refused heartbeat (a
// bad key, a setting the server does not accept) is an error that stops
// the client; a server that cannot be reached is only logged, and the next
// heartbeat tries again.
func (c *Client) heartbeat(ctx context.Context, state string) error {
	body := heartbeatBody{ClientID: c.cfg.ClientID, Hostname: c.cfg.Hostname, Target: c.target, MaxConcurrent: c.cfg.MaxConcurrent,
		Priority: c.cfg.Priority, State: state, ProbePath: c.cfg.ProbePath, Maintenance: c.cfg.Maintenance,
		Resilience: c.cfg.Resilience, Fallback: c.cfg.Fallback}
	if state == "active" {
		body.Scaling = c.cfg.Scaling // announced while serving; re-arms a disarmed record
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.ServerURL+"/api/clients/heartbeat", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	resp, err := c.api.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		c.log.Warn("client: heartbeat failed; trying again at the next one", "server", c.cfg.ServerURL, "err", err)
		return nil
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 500 {
		c.log.Warn("client: heartbeat failed; trying again at the next one", "status", resp.StatusCode)
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Code, Message string }
		json.Unmarshal(raw, &e)
		return fmt.Errorf("the server refused the heartbeat (%d %s): %s", resp.StatusCode, e.Code, e.Message)
	}
	var out struct {
		Scaling *struct {
			Accepted bool   `json:"accepted"`
			Armed    bool   `json:"armed"`
			Notice   string `json:"notice"`
			Error    *struct{ Code, Message string }
		} `json:"scaling"`
	}
	if json.Unmarshal(raw, &out) == nil && out.Scaling != nil {
		s := out.Scaling
		var msg string
		switch {
		case s.Error != nil:
			msg = "scaling block refused: " + s.Error.Message
		case !s.Accepted:
			msg = "scaling block not used: " + s.Notice
		default:
			msg = fmt.Sprintf("scaling block announced (armed: %v)", s.Armed)
		}
		c.mu.Lock()
		changed := msg != c.announced
		c.announced = msg
		c.mu.Unlock()
		if changed {
			if s.Accepted {
				c.log.Info("client: " + msg)
			} else {
				c.log.Warn("client: " + msg)
			}
		}
	}
	return nil
}
