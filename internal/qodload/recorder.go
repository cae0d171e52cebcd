// Package qodload accumulates the QoD load signal: every statement the edge
// serves is added, whole, to its pool's bucket for the minute in which it
// completed. Recording is the hot path, so it takes no global lock and
// allocates nothing once a pool has been seen: pools are found in one of 256
// copy-on-write maps read without a lock, and each pool's buckets sit in a
// one-cache-line handle behind its own small mutex. Closed minutes wait in
// the handle until Drain hands them to the flusher.
package qodload

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
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
	// A Handle is exactly one cache line: the lock, the open minute and
	// the key's bytes inline, so that finding a pool and recording in its
	// open minute touch this line and nothing else. Everything else sits
	// behind cold.
	mu   sync.Mutex
	open Bucket // the newest minute seen
	cold *handleCold
	lens [3]uint8         // lengths of tenant, tenantDb and pool
	name [inlineName]byte // their bytes back to back, when they fit
}

// inlineName is what is left of the handle's cache line for the key.
const inlineName = 64 - 8 - 24 - 8 - 3

type handleCold struct {
	key    pool.Key
	closed []Bucket // older minutes not yet drained; its array is reused
	spare  []Bucket // the array Drain handed out last, reused next time
}

func newHandle(k pool.Key) *Handle {
	h := &Handle{cold: &handleCold{key: k}}
	if len(k.Tenant) > 255 || len(k.TenantDB) > 255 || len(k.Pool) > 255 {
		h.lens = [3]uint8{255, 255, 255} // never matches: found through collided
	} else {
		h.lens = [3]uint8{uint8(len(k.Tenant)), uint8(len(k.TenantDB)), uint8(len(k.Pool))}
	}
	if len(k.Tenant)+len(k.TenantDB)+len(k.Pool) <= inlineName {
		n := copy(h.name[:], k.Tenant)
		n += copy(h.name[n:], k.TenantDB)
		copy(h.name[n:], k.Pool)
	}
	return h
}

// is reports whether the handle records for k. Keys short enough to sit
// inline are compared without reading any other memory.
func (h *Handle) is(k pool.Key) bool {
	if int(h.lens[0]) != len(k.Tenant) || int(h.lens[1]) != len(k.TenantDB) || int(h.lens[2]) != len(k.Pool) {
		return false
	}
	a, b := len(k.Tenant), len(k.Tenant)+len(k.TenantDB)
	if b+len(k.Pool) > inlineName {
		return h.cold.key == k
	}
	return string(h.name[:a]) == k.Tenant && string(h.name[a:b]) == k.TenantDB &&
		string(h.name[b:b+len(k.Pool)]) == k.Pool
}

// Key is the pool the handle records for.
func (h *Handle) Key() pool.Key { return h.cold.key }

// Record adds one statement of durationMs that completed in minute.
func (h *Handle) Record(durationMs, minute int64) {
	h.mu.Lock()
	switch {
	case minute == h.open.Minute:
	case minute > h.open.Minute:
		if h.open.Statements > 0 {
			h.cold.closed = appendMerge(h.cold.closed, h.open)
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
	for i := len(h.cold.closed) - 1; i >= 0; i-- {
		if h.cold.closed[i].Minute == minute {
			h.cold.closed[i].StatementMs += durationMs
			h.cold.closed[i].Statements++
			return
		}
	}
	h.cold.closed = append(h.cold.closed, Bucket{Minute: minute, StatementMs: durationMs, Statements: 1})
}

const shardCount = 256

// Recorder finds a pool's handle by its key. The key is hashed once; the hash
// picks one of 256 shards and then the handle inside the shard's map. Readers
// load the shard's map through an atomic pointer and take no lock at all; a
// new pool copies its shard's map under the shard's mutex (pools are created
// rarely, statements arrive all the time).
type Recorder struct {
	seed   maphash.Seed
	shards [shardCount]shard
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{seed: maphash.MakeSeed()} }

type shard struct {
	handles atomic.Pointer[table] // immutable once published
	mu      sync.Mutex            // serializes writers
	_       [48]byte              // keep shards on their own cache lines
}

// table is one shard's pools. It is never changed once published; a writer
// publishes a changed copy. byHash holds one handle per hash; a pool whose
// hash is already taken (vanishingly rare with 64 bits) goes to collided.
type table struct {
	byHash   map[uint64]*Handle
	collided map[pool.Key]*Handle
}

func (t *table) find(h uint64, k pool.Key) *Handle {
	if t == nil {
		return nil
	}
	if c := t.byHash[h]; c != nil && c.is(k) {
		return c
	}
	// Collisions and keys with a name over 255 bytes live in collided.
	if t.collided != nil {
		return t.collided[k]
	}
	return nil
}

func (t *table) clone() *table {
	next := &table{byHash: make(map[uint64]*Handle, 1)}
	if t == nil {
		return next
	}
	next.byHash = make(map[uint64]*Handle, len(t.byHash)+1)
	for h, c := range t.byHash {
		next.byHash[h] = c
	}
	if len(t.collided) > 0 {
		next.collided = make(map[pool.Key]*Handle, len(t.collided))
		for k, c := range t.collided {
			next.collided[k] = c
		}
	}
	return next
}

func (r *Recorder) hash(k pool.Key) uint64 {
	// Three short-string hashes (hardware accelerated) mixed with odd
	// multipliers cost less than streaming the key through a maphash.Hash.
	return maphash.String(r.seed, k.Tenant)*0x9E3779B97F4A7C15 ^
		maphash.String(r.seed, k.TenantDB)*0xC2B2AE3D27D4EB4F ^
		maphash.String(r.seed, k.Pool)
}

// Handle returns the pool's handle, creating it on first use.
func (r *Recorder) Handle(k pool.Key) *Handle {
	h := r.hash(k)
	s := &r.shards[h%shardCount]
	if c := s.handles.Load().find(h, k); c != nil {
		return c
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.handles.Load()
	if c := old.find(h, k); c != nil {
		return c
	}
	next := old.clone()
	c := newHandle(k)
	if next.byHash[h] == nil && c.lens[0] != 255 {
		next.byHash[h] = c
	} else {
		if next.collided == nil {
			next.collided = map[pool.Key]*Handle{}
		}
		next.collided[k] = c
	}
	s.handles.Store(next)
	return c
}

// Record adds one statement for pool k that took durationMs and completed at.
func (r *Recorder) Record(k pool.Key, durationMs int64, at time.Time) {
	r.Handle(k).Record(durationMs, at.Unix()/60)
}

// Forget drops a deleted pool's handle; what it had not drained is lost with
// the pool.
func (r *Recorder) Forget(k pool.Key) {
	h := r.hash(k)
	s := &r.shards[h%shardCount]
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.handles.Load()
	if old.find(h, k) == nil {
		return
	}
	next := old.clone()
	if c := next.byHash[h]; c != nil && c.is(k) {
		delete(next.byHash, h)
	} else {
		delete(next.collided, k)
	}
	s.handles.Store(next)
}

// each calls fn with every handle, one shard at a time, without holding a
// shard's lock during fn.
func (r *Recorder) each(fn func(*Handle)) {
	var batch []*Handle
	for i := range r.shards {
		s := &r.shards[i]
		batch = batch[:0]
		if t := s.handles.Load(); t != nil {
			for _, c := range t.byHash {
				batch = append(batch, c)
			}
			for _, c := range t.collided {
				batch = append(batch, c)
			}
		}
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
			h.cold.closed = appendMerge(h.cold.closed, h.open)
			h.open = Bucket{Minute: h.open.Minute}
		}
		if len(h.cold.closed) == 0 {
			h.mu.Unlock()
			return
		}
		batch := h.cold.closed
		h.cold.closed, h.cold.spare = h.cold.spare[:0], nil
		h.mu.Unlock()

		err := take(h.cold.key, batch)

		h.mu.Lock()
		if err != nil {
			// Put them back in front of whatever arrived meanwhile.
			for _, b := range h.cold.closed {
				batch = appendMerge(batch, b)
			}
			h.cold.closed = batch
			if firstErr == nil {
				firstErr = err
			}
		} else if h.cold.spare == nil {
			h.cold.spare = batch[:0]
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

// Return gives back buckets that Drain handed out but that could not be
// stored, so that a failed flush loses nothing.
func (r *Recorder) Return(k pool.Key, bs []Bucket) {
	h := r.Handle(k)
	h.mu.Lock()
	for _, b := range bs {
		h.cold.closed = appendMerge(h.cold.closed, b)
	}
	h.mu.Unlock()
}
