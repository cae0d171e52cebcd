package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/qodaperio/autoscale/internal/api"
)

const secretKey = "very-secret-key-value"

func server(t *testing.T, h http.HandlerFunc) (*Client, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.Header.Get("X-API-Key") != secretKey {
			t.Errorf("key not sent: %q", r.Header.Get("X-API-Key"))
		}
		h(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Options{Endpoint: srv.URL + "/", APIKey: secretKey, RetryMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	c.retry.RetryWaitMin, c.retry.RetryWaitMax = 0, 0
	return c, &calls
}

func TestNotFoundIsASentinel(t *testing.T) {
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/pool/get" || r.URL.Query().Get("tenantDb") != "db" {
			t.Errorf("request: %s", r.URL)
		}
		w.WriteHeader(404)
		w.Write([]byte(`{"code":"not_found","message":"pool a/db/p not found"}`))
	})
	_, err := c.GetPool(context.Background(), "a", "db", "p")
	var ae *APIError
	if !errors.Is(err, ErrNotFound) || !errors.As(err, &ae) || ae.Code != "not_found" || ae.Message != "pool a/db/p not found" {
		t.Fatalf("got %v", err)
	}
}

func TestIdempotentCallsRetry5xx(t *testing.T) {
	c, calls := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(503)
		w.Write([]byte(`{"code":"internal","message":"down"}`))
	})
	_, err := c.SetAutoscale(context.Background(), api.SetAutoscaleRequest{})
	if calls.Load() != 3 {
		t.Fatalf("setAutoscale (idempotent) tried %d times, want 1 + 2 retries", calls.Load())
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("got %v", err)
	}
	calls.Store(0)
	c.CreatePool(context.Background(), api.CreatePoolRequest{})
	if calls.Load() != 1 {
		t.Fatalf("create (not idempotent) tried %d times after a 5xx, want 1", calls.Load())
	}
}

func TestRateLimitedCallsRetry(t *testing.T) {
	var n atomic.Int32
	c, calls := server(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(429)
			return
		}
		w.Write([]byte(`{"tenant":"a","size":2}`))
	})
	p, err := c.CreatePool(context.Background(), api.CreatePoolRequest{})
	if err != nil || p.Size != 2 || calls.Load() != 2 {
		t.Fatalf("after a 429: %+v %v, %d calls", p, err, calls.Load())
	}
}

func TestFourHundredsAreNotRetried(t *testing.T) {
	c, calls := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		w.Write([]byte(`{"code":"invalid_band","message":"rule 1"}`))
	})
	_, err := c.SetAutoscale(context.Background(), api.SetAutoscaleRequest{})
	if calls.Load() != 1 || !strings.Contains(err.Error(), "invalid_band (HTTP 400): rule 1") {
		t.Fatalf("%d calls, %v", calls.Load(), err)
	}
}

func TestNonJSONErrorAndKeyNeverInErrors(t *testing.T) {
	c, _ := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		w.Write([]byte("<html>bad gateway</html>"))
	})
	_, err := c.GetPool(context.Background(), "a", "b", "c")
	if err == nil || !strings.Contains(err.Error(), "http_502") || strings.Contains(err.Error(), secretKey) {
		t.Fatalf("got %v", err)
	}
	c2, err := New(Options{Endpoint: "http://127.0.0.1:1", APIKey: secretKey, RetryMax: 1})
	if err != nil {
		t.Fatal(err)
	}
	c2.retry.RetryWaitMin, c2.retry.RetryWaitMax = 0, 0
	_, err = c2.GetPool(context.Background(), "a", "b", "c")
	if err == nil || strings.Contains(err.Error(), secretKey) || strings.Contains(err.Error(), "tenant=") {
		t.Fatalf("connection error leaks: %v", err)
	}
}

func TestEndpointValidation(t *testing.T) {
	for _, bad := range []string{"", "127.0.0.1:20900", "ftp://x", "http://", "http://user:pw@host"} {
		if _, err := New(Options{Endpoint: bad}); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}
