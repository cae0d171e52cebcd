package edge

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// ProbeHeader marks the edge's probes, so that a client does not take
// them for visitors (the reference client's idle_timeout ignores them).
// The edge strips it from visitors' requests.
const ProbeHeader = "X-Aperio-Probe"

// ProbeTimeout bounds one probe.
const ProbeTimeout = 2 * time.Second

// probeClient is the edge's probe client: no proxy from the environment, no
// redirects followed (a redirect is a pass only if the client answers 3xx
// itself, which counts as up), fresh connections kept apart from traffic.
var probeClient = &http.Client{
	Transport:     &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       ProbeTimeout,
}

// Probe GETs ProbePath on every fresh client that declares one, at most
// sixteen at a time, and waits for the answers. A client answering below 400
// passes; anything else, or no answer in ProbeTimeout, fails, and the client
// is not routable until a probe passes again. A client that passes again
// wakes the requests held for its hostname.
func (p *Pools) Probe(ctx context.Context, now time.Time) {
	type job struct {
		host string
		c    *Client
		url  string
	}
	var jobs []job
	p.mu.RLock()
	hosts := make(map[string]*hostPool, len(p.hosts))
	for name, h := range p.hosts {
		hosts[name] = h
	}
	p.mu.RUnlock()
	for name, h := range hosts {
		h.mu.Lock()
		for _, c := range h.clients {
			if c.info.ProbePath != "" && c.info.Target != nil && now.Sub(c.seen) <= p.TTL {
				u := *c.info.Target
				u.Path, u.RawPath, u.RawQuery = joinPath(u.Path, c.info.ProbePath), "", ""
				jobs = append(jobs, job{name, c, u.String()})
			}
		}
		h.mu.Unlock()
	}
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, j := range jobs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ok := probeOnce(ctx, j.url)
			was := !j.c.probeFailed.Swap(!ok)
			if ok && !was {
				if h := p.lookup(j.host); h != nil {
					h.mu.Lock()
					woken := h.wakeIfRoutableLocked(j.c, now, p.TTL)
					h.rebuildLocked()
					h.mu.Unlock()
					wakeAll(woken)
				}
			}
		}()
	}
	wg.Wait()
}

func probeOnce(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	req.Header.Set("User-Agent", "autoscaled-edge-probe")
	req.Header.Set(ProbeHeader, "1")
	resp, err := probeClient.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode < 400
}
