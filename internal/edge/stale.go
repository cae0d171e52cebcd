package edge

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A hostname that opted into resilience keeps its recent successful GET
// answers; when no client answers within the cold-start budget (or none is
// registered), the kept answer is served, marked stale, before the fallback
// redirect and the final error.

const (
	staleEntries = 64       // answers kept per hostname
	staleMaxBody = 64 << 10 // larger answers are not kept
)

type staleAnswer struct {
	status int
	header http.Header
	body   []byte
	at     time.Time
}

// staleCache is one hostname's kept answers, by request URI; the oldest
// goes when it is full.
type staleCache struct {
	mu    sync.Mutex
	m     map[string]*staleAnswer
	order []string
}

func newStaleCache() *staleCache { return &staleCache{m: map[string]*staleAnswer{}} }

func (s *staleCache) get(key string) *staleAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[key]
}

func (s *staleCache) put(key string, a *staleAnswer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[key]; !ok {
		if len(s.order) >= staleEntries {
			delete(s.m, s.order[0])
			s.order = s.order[1:]
		}
		s.order = append(s.order, key)
	}
	s.m[key] = a
}

// keepable reports whether the answer to r may be kept: a GET carrying no
// credentials, since an answer personalised for one visitor must never be
// served to another.
func keepable(r *http.Request) bool {
	return r.Method == http.MethodGet && r.Header.Get("Authorization") == "" && r.Header.Get("Cookie") == ""
}

// serve writes a kept answer, marked with its age.
func (a *staleAnswer) serve(w http.ResponseWriter, now time.Time) {
	h := w.Header()
	for k, vv := range a.header {
		h[k] = vv
	}
	h.Set("X-Aperio-Stale", strconv.Itoa(int(now.Sub(a.at).Seconds())))
	w.WriteHeader(a.status)
	w.Write(a.body)
}

// recorder passes an answer through to the visitor and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status   int
	header   http.Header
	body     []byte
	overflow bool
}

func (rec *recorder) WriteHeader(code int) {
	if rec.status == 0 {
		rec.status = code
		rec.header = rec.ResponseWriter.Header().Clone()
	}
	rec.ResponseWriter.WriteHeader(code)
}

func (rec *recorder) Write(b []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !rec.overflow {
		if len(rec.body)+len(b) > staleMaxBody {
			rec.overflow, rec.body = true, nil
		} else {
			rec.body = append(rec.body, b...)
		}
	}
	return rec.ResponseWriter.Write(b)
}

func (rec *recorder) Flush() {
	if f, ok := rec.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (rec *recorder) Unwrap() http.ResponseWriter { return rec.ResponseWriter }

// answer is what was recorded, if it may be kept: a whole 200 whose
// headers do not forbid keeping it.
func (rec *recorder) answer(now time.Time) *staleAnswer {
	if rec.status != http.StatusOK || rec.overflow || rec.header.Get("Set-Cookie") != "" {
		return nil
	}
	cc := strings.ToLower(rec.header.Get("Cache-Control"))
	if strings.Contains(cc, "no-store") || strings.Contains(cc, "private") {
		return nil
	}
	return &staleAnswer{status: rec.status, header: rec.header, body: rec.body, at: now}
}
