package apiserver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/qodaperio/autoscale/internal/events"
)

// keepAlive is how often an idle event stream gets a comment line, so that
// proxies and load balancers keep the connection open.
const keepAlive = 15 * time.Second

// streamEvents is GET /api/events: server-sent events. An org key sees its
// tenant's events only. A client that reconnects with Last-Event-ID gets what
// it missed, as far back as the server's ring of recent events reaches; when
// the ring no longer reaches, a "gap" event says so.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request) error {
	q, err := queryParams(r.URL.Query(), "tenant", "lastEventId")
	if err != nil {
		return err
	}
	tenant, err := visibleTenant(r, q["tenant"])
	if err != nil {
		return err
	}
	var since uint64
	last := r.Header.Get("Last-Event-ID")
	if v, ok := q["lastEventId"]; ok {
		last = v
	}
	if last != "" {
		if since, err = strconv.ParseUint(last, 10, 64); err != nil {
			return invalidRequest("Last-Event-ID %q is not accepted; accepted: the numeric id of an event", clip(last))
		}
	}
	rc := http.NewResponseController(w)
	var filter func(events.Event) bool
	if tenant != "" {
		filter = func(e events.Event) bool { return e.Tenant == tenant }
	}
	sub, backlog, complete := s.events.Subscribe(since, filter)
	defer s.events.Unsubscribe(sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(e events.Event) error {
		data, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_ = rc.SetWriteDeadline(time.Now().Add(keepAlive * 2))
		if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.ID, e.Type, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	_ = rc.SetWriteDeadline(time.Now().Add(keepAlive * 2))
	if !complete {
		fmt.Fprintf(w, "event: gap\ndata: {\"message\":\"events after %d are no longer held; re-read state from the API\"}\n\n", since)
	}
	fmt.Fprint(w, ": stream open\n\n")
	if err := rc.Flush(); err != nil {
		return nil
	}
	for _, e := range backlog {
		if write(e) != nil {
			return nil
		}
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		case e, ok := <-sub.C:
			if !ok {
				// Cut off for falling behind: the client reconnects
				// with Last-Event-ID and replays.
				return nil
			}
			if write(e) != nil {
				return nil
			}
		case <-tick.C:
			_ = rc.SetWriteDeadline(time.Now().Add(keepAlive * 2))
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return nil
			}
		}
	}
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}
