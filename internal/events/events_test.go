package events

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func TestSubscribersGetEventsTheirFilterAccepts(t *testing.T) {
	b := NewBus()
	acme, _, _ := b.Subscribe(0, func(e Event) bool { return e.Tenant == "acme" })
	all, _, _ := b.Subscribe(0, nil)
	b.Publish("PoolScaled", "acme", t0, map[string]int{"toSize": 3})
	b.Publish("PoolScaled", "globex", t0, nil)
	if e := <-acme.C; e.Tenant != "acme" || e.ID != 1 {
		t.Fatalf("acme got %+v", e)
	}
	if len(acme.C) != 0 {
		t.Fatal("acme saw another tenant's event")
	}
	if (<-all.C).ID != 1 || (<-all.C).ID != 2 {
		t.Fatal("unfiltered subscriber missed events")
	}
	b.Unsubscribe(all)
	if _, open := <-all.C; open {
		t.Fatal("unsubscribed channel still open")
	}
}

func TestASlowSubscriberIsCutOffAndReplaysFromTheRing(t *testing.T) {
	b := NewBus()
	slow, _, _ := b.Subscribe(0, nil)
	for range SubBuffer + 1 {
		b.Publish("PoolScaled", "acme", t0, nil) // never blocks
	}
	var last uint64
	for e := range slow.C { // closed after the buffer drains
		last = e.ID
	}
	if last != SubBuffer {
		t.Fatalf("slow subscriber saw up to %d, want %d", last, SubBuffer)
	}
	_, backlog, complete := b.Subscribe(last, nil)
	if !complete || len(backlog) != 1 || backlog[0].ID != SubBuffer+1 {
		t.Fatalf("replay after %d: %d events, complete %v", last, len(backlog), complete)
	}
}

func TestReplayReportsEventsThatLeftTheRing(t *testing.T) {
	b := NewBus()
	for range RingSize + 10 {
		b.Publish("PoolScaled", "acme", t0, nil)
	}
	_, backlog, complete := b.Subscribe(5, nil)
	if complete || len(backlog) != RingSize || backlog[0].ID != 11 || backlog[RingSize-1].ID != RingSize+10 {
		t.Fatalf("replay from 5: %d events from %d, complete %v", len(backlog), backlog[0].ID, complete)
	}
	_, backlog, complete = b.Subscribe(b.Last(), nil)
	if !complete || len(backlog) != 0 {
		t.Fatal("replay from the newest event is not empty")
	}
}
