// Package events fans server events (PoolScaled, and the hook events) out to
// subscribers such as the server-sent events stream. Publishing never
// blocks: a subscriber that falls behind is cut off, and reconnects with the
// id of the last event it saw to replay what it missed from a ring of recent
// events.
package events

import (
	"sync"
	"time"
)

// Event is one thing that happened.
type Event struct {
	ID     uint64    `json:"id"`
	Type   string    `json:"type"`
	At     time.Time `json:"at"`
	Tenant string    `json:"tenant,omitempty"`
	Data   any       `json:"data"`
}

// Bus keeps the last events and the live subscribers.
type Bus struct {
	mu   sync.Mutex
	ring []Event // the last cap(ring) events, oldest first once full
	head int     // where the next event goes once the ring is full
	last uint64
	subs map[*Sub]struct{}
}

// RingSize is how many recent events a reconnecting subscriber can replay.
const RingSize = 1024

// SubBuffer is how many events a subscriber may fall behind before it is cut
// off.
const SubBuffer = 256

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{ring: make([]Event, 0, RingSize), subs: map[*Sub]struct{}{}} }

// Sub is one subscriber. C is closed when the subscriber was cut off for
// falling behind, or unsubscribed.
type Sub struct {
	C      <-chan Event
	c      chan Event
	filter func(Event) bool
}

// Publish records an event and hands it to every subscriber.
func (b *Bus) Publish(typ, tenant string, at time.Time, data any) Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.last++
	e := Event{ID: b.last, Type: typ, At: at, Tenant: tenant, Data: data}
	if len(b.ring) < cap(b.ring) {
		b.ring = append(b.ring, e)
	} else {
		b.ring[b.head] = e
		b.head = (b.head + 1) % len(b.ring)
	}
	for s := range b.subs {
		if s.filter != nil && !s.filter(e) {
			continue
		}
		select {
		case s.c <- e:
		default:
			delete(b.subs, s)
			close(s.c)
		}
	}
	return e
}

// Subscribe returns a subscriber that receives the events filter accepts
// (nil: all) and, first, the recorded ones after id since (0: none). It
// reports false in complete when events after since have already left the
// ring.
func (b *Bus) Subscribe(since uint64, filter func(Event) bool) (s *Sub, backlog []Event, complete bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := make(chan Event, SubBuffer)
	s = &Sub{C: c, c: c, filter: filter}
	b.subs[s] = struct{}{}
	complete = true
	if since > 0 && since < b.last {
		n := len(b.ring)
		oldest := b.ring[b.head%n].ID
		if since+1 < oldest {
			complete = false
		}
		for i := range n {
			e := b.ring[(b.head+i)%n]
			if e.ID > since && (filter == nil || filter(e)) {
				backlog = append(backlog, e)
			}
		}
	}
	return s, backlog, complete
}

// Unsubscribe removes s; its channel is closed.
func (b *Bus) Unsubscribe(s *Sub) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.subs[s]; ok {
		delete(b.subs, s)
		close(s.c)
	}
}

// Last is the id of the newest event.
func (b *Bus) Last() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.last
}
