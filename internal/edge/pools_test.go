package edge

import (
	"net/url"
	"testing"
	"time"
)

// A client that stopped heartbeating is forgotten once it serves nothing,
// by the next heartbeat for its hostname as well as by the hook loop's
// sample: a hostname without a hook is never sampled.
func TestExpiredClientsAreForgotten(t *testing.T) {
	p := NewPools(30*time.Second, 10)
	u, _ := url.Parse("http://127.0.0.1:1")
	t0 := time.Unix(0, 0)
	p.Heartbeat("a.test", "old", ClientInfo{Target: u, State: Active, ProbeOK: true}, HostSettings{}, t0)
	p.Heartbeat("a.test", "new", ClientInfo{Target: u, State: Active, ProbeOK: true}, HostSettings{}, t0.Add(31*time.Second))
	h := p.lookup("a.test")
	h.mu.Lock()
	_, kept := h.clients["old"]
	n := len(h.view.Load().clients)
	h.mu.Unlock()
	if kept || n != 1 {
		t.Fatalf("old client kept: %v, clients in the view: %d", kept, n)
	}
	if c, _ := p.Pick("a.test", t0.Add(31*time.Second)); c == nil || c.ID != "new" {
		t.Fatalf("picked %v", c)
	}
}
