// Package client is the Go client of the control plane's API, used by the
// Terraform providers and the tools. Idempotent calls are retried on
// connection errors, 429 and 5xx with bounded backoff; keys are sent in a
// header and never logged.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/qodaperio/autoscale/internal/api"
	"github.com/qodaperio/autoscale/internal/hook"
)

// ErrNotFound matches (errors.Is) an *APIError with status 404.
var ErrNotFound = errors.New("not found")

// APIError is an error answer from the server.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// Is makes errors.Is(err, ErrNotFound) true for a 404.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// Options configure a Client.
type Options struct {
	Endpoint string // e.g. http://127.0.0.1:20900
	APIKey   string
	// RetryMax bounds retries of idempotent calls (default 4).
	RetryMax int
	// HTTPClient overrides the transport (tests).
	HTTPClient *http.Client
	UserAgent  string
}

// Client talks to one API server.
type Client struct {
	base  *url.URL
	key   string
	ua    string
	retry *retryablehttp.Client
}

// New checks the options and returns a client.
func New(o Options) (*Client, error) {
	if o.Endpoint == "" {
		return nil, errors.New("endpoint is empty; accepted: an http or https URL such as http://127.0.0.1:20900")
	}
	u, err := url.Parse(o.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("endpoint %q is not an http or https URL with a host", o.Endpoint)
	}
	if u.User != nil {
		return nil, errors.New("endpoint must not carry credentials in the URL; use api_key")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	rc := retryablehttp.NewClient()
	rc.Logger = nil // its logs would carry URLs at debug level; we want none
	rc.RetryMax = 4
	if o.RetryMax > 0 {
		rc.RetryMax = o.RetryMax
	}
	rc.RetryWaitMin = 100 * time.Millisecond
	rc.RetryWaitMax = 2 * time.Second
	rc.CheckRetry = checkRetry
	rc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	if o.HTTPClient != nil {
		rc.HTTPClient = o.HTTPClient
	} else {
		rc.HTTPClient.Timeout = 30 * time.Second
		// Terraform runs 10 operations at once by default; keep that many
		// connections alive instead of opening a new one per call.
		if t, ok := rc.HTTPClient.Transport.(*http.Transport); ok {
			t.MaxIdleConnsPerHost = 32
		}
	}
	ua := o.UserAgent
	if ua == "" {
		ua = "qodaperio-client"
	}
	return &Client{base: u, key: o.APIKey, ua: ua, retry: rc}, nil
}

type idempotentKey struct{}

// checkRetry retries connection errors, 429 and 5xx, but only for calls
// marked idempotent; others are retried only on 429, which the server sends
// before doing anything.
func checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	idem, _ := ctx.Value(idempotentKey{}).(bool)
	if err != nil {
		// A refused dial never reached the server, so even a
		// non-idempotent call is safe to send again.
		var oerr *net.OpError
		return idem || (errors.As(err, &oerr) && oerr.Op == "dial"), nil
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return true, nil
	}
	return idem && resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented, nil
}

func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any, idempotent bool) error {
	u := *c.base
	u.Path += path
	if query != nil {
		u.RawQuery = query.Encode()
	}
	var buf []byte
	if body != nil {
		var err error
		if buf, err = json.Marshal(body); err != nil {
			return err
		}
	}
	ctx = context.WithValue(ctx, idempotentKey{}, idempotent)
	req, err := retryablehttp.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(buf))
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.ua)
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := c.retry.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, scrub(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e api.Error
		if json.Unmarshal(data, &e) != nil || e.Code == "" {
			e = api.Error{Code: "http_" + fmt.Sprint(resp.StatusCode), Message: strings.TrimSpace(string(clipBytes(data)))}
		}
		return &APIError{Status: resp.StatusCode, Code: e.Code, Message: e.Message}
	}
	if out != nil && resp.StatusCode != http.StatusNoContent {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, path, err)
		}
	}
	return nil
}

func clipBytes(b []byte) []byte {
	if len(b) > 300 {
		return b[:300]
	}
	return b
}

// scrub drops the URL's query from transport errors: it is harmless today,
// but errors end up in logs and a URL is the usual place for secrets to leak.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.RawQuery = ""
			return &url.Error{Op: ue.Op, URL: u.String(), Err: ue.Err}
		}
	}
	return err
}

func poolQuery(tenant, tenantDB, pool string) url.Values {
	return url.Values{"tenant": {tenant}, "tenantDb": {tenantDB}, "pool": {pool}}
}

// GetPool reads one pool.
func (c *Client) GetPool(ctx context.Context, tenant, tenantDB, pool string) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodGet, "/api/pool/get", poolQuery(tenant, tenantDB, pool), nil, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListPools lists pools, all visible ones when tenant is empty.
func (c *Client) ListPools(ctx context.Context, tenant string) ([]api.Pool, error) {
	var q url.Values
	if tenant != "" {
		q = url.Values{"tenant": {tenant}}
	}
	var out api.PoolList
	if err := c.do(ctx, http.MethodGet, "/api/pool/list", q, nil, &out, true); err != nil {
		return nil, err
	}
	return out.Pools, nil
}

// CreatePool creates a pool.
func (c *Client) CreatePool(ctx context.Context, req api.CreatePoolRequest) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPost, "/api/pool/create", nil, req, &p, false); err != nil {
		return nil, err
	}
	return &p, nil
}

// SetAutoscale declares (both bounds) or clears (neither) a pool's band.
func (c *Client) SetAutoscale(ctx context.Context, req api.SetAutoscaleRequest) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPost, "/api/pool/setAutoscale", nil, req, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// Scale moves a pool to a target size.
func (c *Client) Scale(ctx context.Context, req api.ScaleRequest) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPost, "/api/pool/scale", nil, req, &p, false); err != nil {
		return nil, err
	}
	return &p, nil
}

// Suspend stops a pool, keeping its role distribution.
func (c *Client) Suspend(ctx context.Context, ref api.PoolRef) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPost, "/api/pool/suspend", nil, ref, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// Resume brings a suspended pool back.
func (c *Client) Resume(ctx context.Context, ref api.PoolRef) (*api.Pool, error) {
	var p api.Pool
	if err := c.do(ctx, http.MethodPost, "/api/pool/resume", nil, ref, &p, true); err != nil {
		return nil, err
	}
	return &p, nil
}

// DeletePool deletes a pool.
func (c *Client) DeletePool(ctx context.Context, ref api.PoolRef) error {
	return c.do(ctx, http.MethodPost, "/api/pool/delete", nil, ref, nil, false)
}

// AutoscaleConfig reads the server's effective autoscale settings.
func (c *Client) AutoscaleConfig(ctx context.Context) (*api.AutoscaleConfig, error) {
	var out api.AutoscaleConfig
	if err := c.do(ctx, http.MethodGet, "/api/autoscale/config", nil, nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateKey creates an API key (operator only); the answer holds the secret.
func (c *Client) CreateKey(ctx context.Context, req api.CreateKeyRequest) (*api.Key, error) {
	var out api.Key
	if err := c.do(ctx, http.MethodPost, "/api/keys", nil, req, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetQuota sets a tenant's node quota (operator only).
func (c *Client) SetQuota(ctx context.Context, tenant string, quota int) (*api.Tenant, error) {
	var out api.Tenant
	if err := c.do(ctx, http.MethodPost, "/api/tenant/setQuota", nil, api.SetQuotaRequest{Tenant: tenant, NodeQuota: &quota}, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// RecordLoad reports statements served for a pool. Not retried: a retry
// after a lost answer would count the statements twice.
func (c *Client) RecordLoad(ctx context.Context, req api.LoadRequest) (*api.LoadResponse, error) {
	var out api.LoadResponse
	if err := c.do(ctx, http.MethodPost, "/api/pool/load", nil, req, &out, false); err != nil {
		return nil, err
	}
	return &out, nil
}

// AutoscaleStatus explains what the last sweep saw and decided for a pool.
func (c *Client) AutoscaleStatus(ctx context.Context, tenant, tenantDB, pool string) (*api.AutoscaleStatus, error) {
	var out api.AutoscaleStatus
	q := url.Values{"tenant": {tenant}, "tenantDb": {tenantDB}, "pool": {pool}}
	if err := c.do(ctx, http.MethodGet, "/api/pool/autoscaleStatus", q, nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetRoutable marks a node of the memory backend routable or not.
func (c *Client) SetRoutable(ctx context.Context, req api.SetRoutableRequest) error {
	return c.do(ctx, http.MethodPost, "/api/pool/nodes/setRoutable", nil, req, nil, true)
}

// ScalingRequest is a declaration sent to PUT /api/scaling/{hostname} or
// POST /api/scaling/validate, with the write-only secret.
type ScalingRequest struct {
	hook.Declaration
	Secret *string `json:"secret,omitempty"`
}

// PutScaling declares or edits the record for a hostname. PUT is
// idempotent, so it is retried like a read.
func (c *Client) PutScaling(ctx context.Context, req ScalingRequest) (*api.ScalingRecord, error) {
	var out api.ScalingRecord
	if err := c.do(ctx, http.MethodPut, "/api/scaling/"+url.PathEscape(req.Hostname), nil, req, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// ValidateScaling checks a declaration against every rule and the live
// outbound fence without storing it.
func (c *Client) ValidateScaling(ctx context.Context, req ScalingRequest) (*api.ScalingValidation, error) {
	var out api.ScalingValidation
	if err := c.do(ctx, http.MethodPost, "/api/scaling/validate", nil, req, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetScaling reads a record by id or hostname.
func (c *Client) GetScaling(ctx context.Context, idOrHostname string) (*api.ScalingRecord, error) {
	var out api.ScalingRecord
	if err := c.do(ctx, http.MethodGet, "/api/scaling/"+url.PathEscape(idOrHostname), nil, nil, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListScaling lists the records the key may see.
func (c *Client) ListScaling(ctx context.Context) ([]api.ScalingRecord, error) {
	var out api.ScalingList
	if err := c.do(ctx, http.MethodGet, "/api/scaling", nil, nil, &out, true); err != nil {
		return nil, err
	}
	return out.Records, nil
}

// DisarmScaling deletes a record.
func (c *Client) DisarmScaling(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/api/scaling/"+url.PathEscape(id), nil, nil, nil, true)
}
