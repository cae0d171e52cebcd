package qodload

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/qodaperio/autoscale/internal/pool"
)

var bi = pool.Key{Tenant: "acme", TenantDB: "acme_sales", Pool: "bi"}

func at(sec int) time.Time { return time.Unix(int64(sec), 0) }

func drain(t *testing.T, r *Recorder, now time.Time) map[pool.Key][]Bucket {
	t.Helper()
	out := map[pool.Key][]Bucket{}
	if err := r.Drain(now, func(k pool.Key, bs []Bucket) error {
		out[k] = append([]Bucket(nil), bs...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStatementsLandInTheMinuteTheyCompleted(t *testing.T) {
	r := NewRecorder()
	r.Record(bi, 1000, at(59))  // minute 0
	r.Record(bi, 500, at(60))   // minute 1
	r.Record(bi, 250, at(119))  // minute 1
	r.Record(bi, 4000, at(180)) // minute 3, still open at t=200
	got := drain(t, r, at(200))
	want := []Bucket{{0, 1000, 1}, {1, 750, 2}}
	if fmt.Sprint(got[bi]) != fmt.Sprint(want) {
		t.Fatalf("drained %v, want %v", got[bi], want)
	}
	if got := drain(t, r, at(200)); len(got) != 0 {
		t.Fatalf("drained twice: %v", got)
	}
	got = drain(t, r, at(240)) // minute 3 has closed
	if fmt.Sprint(got[bi]) != fmt.Sprint([]Bucket{{3, 4000, 1}}) {
		t.Fatalf("open minute after it closed: %v", got[bi])
	}
}

func TestLateReportsAreKept(t *testing.T) {
	r := NewRecorder()
	r.Record(bi, 100, at(130)) // minute 2
	r.Record(bi, 7, at(10))    // minute 0, reported late
	r.Record(bi, 3, at(20))
	got := drain(t, r, at(300))
	if fmt.Sprint(got[bi]) != fmt.Sprint([]Bucket{{0, 10, 2}, {2, 100, 1}}) {
		t.Fatalf("%v", got[bi])
	}
	// Late for a minute already drained: a new bucket for it, added again
	// by the flush.
	r.Record(bi, 5, at(15))
	if got := drain(t, r, at(300)); fmt.Sprint(got[bi]) != fmt.Sprint([]Bucket{{0, 5, 1}}) {
		t.Fatalf("%v", got[bi])
	}
}

func TestFailedFlushLosesNothing(t *testing.T) {
	r := NewRecorder()
	r.Record(bi, 100, at(10))
	boom := errors.New("database down")
	err := r.Drain(at(120), func(pool.Key, []Bucket) error {
		r.Record(bi, 1, at(15)) // arrives while the flush runs
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got := drain(t, r, at(120)); fmt.Sprint(got[bi]) != fmt.Sprint([]Bucket{{0, 101, 2}}) {
		t.Fatalf("after a failed flush: %v", got[bi])
	}
}

func TestConcurrentRecordingAndDrainingAddUp(t *testing.T) {
	r := NewRecorder()
	keys := []pool.Key{bi, {Tenant: "a", TenantDB: "b", Pool: "c"}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := map[pool.Key]int64{}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			r.Drain(at(1_000_000), func(k pool.Key, bs []Bucket) error {
				mu.Lock()
				for _, b := range bs {
					total[k] += b.StatementMs
				}
				mu.Unlock()
				return nil
			})
		}
	}()
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				r.Record(keys[(w+i)%2], 1, at(i%600))
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
	for k, bs := range drain(t, r, at(1_000_000)) {
		for _, b := range bs {
			total[k] += b.StatementMs
		}
	}
	if total[keys[0]] != 40000 || total[keys[1]] != 40000 {
		t.Fatalf("recorded 40000 ms per pool, drained %v", total)
	}
}

func TestHandleIsOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(Handle{}); n != 64 {
		t.Fatalf("Handle is %d bytes, want 64 (one cache line)", n)
	}
}

// Keys too long to sit inline, and keys longer than 255 bytes, are still
// told apart and recorded once each.
func TestLongKeysAreToldApart(t *testing.T) {
	r := NewRecorder()
	long := strings.Repeat("x", 40)
	huge := strings.Repeat("y", 300)
	ks := []pool.Key{
		{Tenant: "acme", TenantDB: long, Pool: "a"},
		{Tenant: "acme", TenantDB: long, Pool: "b"},
		{Tenant: huge, TenantDB: "d", Pool: "p"},
		{Tenant: huge, TenantDB: "d", Pool: "q"},
		{Tenant: "ac", TenantDB: "me", Pool: "x"}, // same bytes as "a"+"cme"+"x" inline
		{Tenant: "a", TenantDB: "cme", Pool: "x"},
	}
	for i, k := range ks {
		for range i + 1 {
			r.Record(k, 10, at(0))
		}
	}
	got := drain(t, r, at(60))
	for i, k := range ks {
		if len(got[k]) != 1 || got[k][0].Statements != int64(i+1) {
			t.Errorf("%v: got %v, want %d statements", k, got[k], i+1)
		}
	}
}

func TestReturnedBucketsComeBackWithTheNextDrain(t *testing.T) {
	r := NewRecorder()
	r.Record(bi, 100, at(10))
	first := drain(t, r, at(70))
	r.Return(bi, first[bi])  // the flush failed
	r.Record(bi, 5, at(30))  // a late statement for the same minute
	r.Record(bi, 7, at(130)) // the open minute, not drained yet
	got := drain(t, r, at(130))
	if len(got[bi]) != 1 || got[bi][0] != (Bucket{Minute: 0, StatementMs: 105, Statements: 2}) {
		t.Fatalf("after return: %v", got[bi])
	}
}
