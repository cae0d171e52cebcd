// Package qodload accumulates the QoD load signal: every statement the edge
// serves is added, whole, to its pool's bucket for the minute in which it
// completed. Recording is the hot path, so it takes no global lock and
// allocates nothing once a pool has been seen: pools are found in one of 256
// sharded maps and each pool's buckets sit behind their own small mutex. Closed
// minutes wait in the pool's handle until Drain hands them to the flusher.
package qodload

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/qodaperio/autoscale/internal/pool"
)

// Bucket is one pool's load in one minute (minutes since the epoch).
type Bucket struct {
	Minute      int64
	StatementMs int64
	Statements  int64
}

// Handle is one pool's buckets. Keep it to record without the lookup.
type Handle struct {
	key    pool.Key
	mu     sync.Mutex
	open   Bucket   // the newest minute seen
	closed []Bucket // older minutes not yet drained; its array is reused
	spare  []Bucket // the array Drain handed out last, reused next time
}

// Key is the pool the handle records for.
func (h *Handle) Key() pool.Key { return h.key }

// Record adds one statement of durationMs that completed in minute.
func (h *Handle) Record(durationMs, minute int64) {
	h.mu.Lock()
	switch {
	case minute == h.open.Minute:
	case minute > h.open.Minute:
		if h.open.Statements > 0 {
			h.closed = append(h.closed, h.open)
		}
		h.open = Bucket{Minute: minute}
	default:
		// A late report for an older minute: it is added to that
		// minute, never dropped (the flush is additive).
		h.addClosed(minute, durationMs)
		h.mu.Unlock()
		return
	}
	h.open.StatementMs += durationMs
	h.open.Statements++
	h.mu.Unlock()
}

func (h *Handle) addClosed(minute, durationMs int64) {
	for i := len(h.closed) - 1; i >= 0; i-- {
		if h.closed[i].Minute == minute {
			h.closed[i].StatementMs += durationMs
			h.closed[i].Statements++
			return
		}
	}
	h.closed = append(h.closed, Bucket{Minute: minute, StatementMs: durationMs, Statements: 1})
}

const shardCount = 256

// Recorder finds a pool's handle by its key. The pools are spread over 256
// shards, each a map behind its own read-write lock, so no lock is shared by
// all recorders and a sweep's Drain holds one shard at a time.
type Recorder struct {
	seed   maphash.Seed
	shards [shardCount]shard
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{seed: maphash.MakeSeed()} }

type shard struct {
	mu      sync.RWMutex
	handles map[pool.Key]*Handle
	_       [40]byte // keep shards on their own cache lines
}

func (r *Recorder) shardOf(k pool.Key) *shard {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(k.Tenant)
	h.WriteByte('/')
	h.WriteString(k.TenantDB)
	h.WriteByte('/')
	h.WriteString(k.Pool)
	return &r.shards[h.Sum64()%shardCount]
}

// Handle returns the pool's handle, creating it on first use.
func (r *Recorder) Handle(k pool.Key) *Handle {
	s := r.shardOf(k)
	s.mu.RLock()
	h := s.handles[k]
	s.mu.RUnlock()
	if h != nil {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h = s.handles[k]; h == nil {
		if s.handles == nil {
			s.handles = make(map[pool.Key]*Handle)
		}
		h = &Handle{key: k}
		s.handles[k] = h
	}
	return h
}

// Record adds one statement for pool k that took durationMs and completed at.
func (r *Recorder) Record(k pool.Key, durationMs int64, at time.Time) {
	r.Handle(k).Record(durationMs, at.Unix()/60)
}

// Forget drops a deleted pool's handle; what it had not drained is lost with
// the pool.
func (r *Recorder) Forget(k pool.Key) {
	s := r.shardOf(k)
	s.mu.Lock()
	delete(s.handles, k)
	s.mu.Unlock()
}

// each calls fn with every handle, one shard at a time, without holding a
// shard's lock during fn.
func (r *Recorder) each(fn func(*Handle)) {
	var batch []*Handle
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.RLock()
		batch = batch[:0]
		for _, h := range s.handles {
			batch = append(batch, h)
		}
		s.mu.RUnlock()
		for _, h := range batch {
			fn(h)
		}
	}
}

// Drain calls take with each pool's closed buckets: every minute before
// now's. The slice passed to take is only valid during the call. A take that
// fails hands the buckets back, so a failed flush loses nothing.
func (r *Recorder) Drain(now time.Time, take func(k pool.Key, closed []Bucket) error) error {
	current := now.Unix() / 60
	var firstErr error
	r.each(func(h *Handle) {
		h.mu.Lock()
		if h.open.Statements > 0 && h.open.Minute < current {
			h.closed = appendMerge(h.closed, h.open)
			h.open = Bucket{Minute: h.open.Minute}
		}
		if len(h.closed) == 0 {
			h.mu.Unlock()
			return
		}
		batch := h.closed
		h.closed, h.spare = h.spare[:0], nil
		h.mu.Unlock()

		err := take(h.key, batch)

		h.mu.Lock()
		if err != nil {
			// Put them back in front of whatever arrived meanwhile.
			for _, b := range h.closed {
				batch = appendMerge(batch, b)
			}
			h.closed = batch
			if firstErr == nil {
				firstErr = err
			}
		} else if h.spare == nil {
			h.spare = batch[:0]
		}
		h.mu.Unlock()
	})
	return firstErr
}

func appendMerge(bs []Bucket, b Bucket) []Bucket {
	for i := range bs {
		if bs[i].Minute == b.Minute {
			bs[i].StatementMs += b.StatementMs
			bs[i].Statements += b.Statements
			return bs
		}
	}
	return append(bs, b)
}
