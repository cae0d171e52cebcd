package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/qodaperio/autoscale/internal/events"
)

// RunWebhooks delivers every event to the operator's event webhooks
// (APERIO_EVENT_WEBHOOKS) through the outbound fence until ctx ends. A
// delivery that fails is logged and not retried: the audit log keeps every
// event; webhooks are for being told. Falling behind the bus resumes from
// the last delivered event.
func (s *Server) RunWebhooks(ctx context.Context) error {
	if len(s.aperio.EventWebhooks) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	var last uint64
	for {
		sub, backlog, _ := s.events.Subscribe(last, nil)
		for _, e := range backlog {
			s.deliver(ctx, e)
			last = e.ID
		}
		for open := true; open; {
			select {
			case <-ctx.Done():
				s.events.Unsubscribe(sub)
				return ctx.Err()
			case e, ok := <-sub.C:
				if !ok {
					open = false // cut off for falling behind: resubscribe and replay
					break
				}
				s.deliver(ctx, e)
				last = e.ID
			}
		}
	}
}

func (s *Server) deliver(ctx context.Context, e events.Event) {
	body, err := json.Marshal(e)
	if err != nil {
		return
	}
	for _, u := range s.aperio.EventWebhooks {
		if err := s.post(ctx, u, e.Type, body); err != nil {
			s.log.Warn("webhooks: delivery failed", "event", e.Type, "id", e.ID, "err", err)
		}
	}
}

func (s *Server) post(ctx context.Context, rawURL, typ string, body []byte) error {
	target, err := s.fence.Check(ctx, rawURL)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Event-Type", typ)
	resp, err := s.fence.Do(ctx, target, req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %d", target, resp.StatusCode)
	}
	return nil
}
