// Package fence is the outbound fence: the one way the server calls a URL
// that someone else chose (scaling hooks, event webhooks). A call is allowed
// only when the URL is well-formed, its scheme is allowed, every address its
// host resolves to passes the address check and the operator's policy, and
// then it connects only to those checked addresses, checking each again as
// it dials. No proxy from the environment, no redirects, no retries.
package fence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"

	"github.com/qodaperio/autoscale/internal/api"
)

// Policy is what the operator allows (the APERIO_* settings).
type Policy struct {
	// AllowHTTP permits plain http:// destinations.
	AllowHTTP bool
	// AllowPrivate permits private, loopback, link-local and other
	// internal addresses.
	AllowPrivate bool
	// Allowlist, when not empty, is the only set of destinations: host
	// names, globs such as *.example.com, and CIDRs. A destination passes
	// when its host matches a name or glob, or every address it resolves
	// to is inside one of the CIDRs. The address check applies on top.
	Allowlist []string
	// BlockPrivate, with no allowlist, refuses internal addresses even
	// when AllowPrivate is set.
	BlockPrivate bool
}

// Resolver looks host names up; tests inject one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Fence checks destinations and makes calls to them.
type Fence struct {
	policy   Policy
	resolver Resolver
	guard    *ssrf.Guardian
	cidrs    []netip.Prefix
	globs    []string
	// Timeout bounds a whole call.
	Timeout time.Duration
}

// New returns a fence; a nil resolver means the system's.
func New(p Policy, r Resolver) (*Fence, error) {
	if r == nil {
		r = net.DefaultResolver
	}
	f := &Fence{policy: p, resolver: r, guard: ssrf.New(ssrf.WithAnyPort()), Timeout: 10 * time.Second}
	for _, e := range p.Allowlist {
		if pfx, err := netip.ParsePrefix(e); err == nil {
			f.cidrs = append(f.cidrs, pfx.Masked())
			continue
		}
		f.globs = append(f.globs, strings.ToLower(e))
	}
	return f, nil
}

// RefusedError is a destination the fence refused; it is never retried.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string { return "destination refused: " + e.Reason }

// APIError is the refusal as the API's destination_refused error, naming
// the field that carried the URL.
func (e *RefusedError) APIError(field string) *api.Error {
	return api.Errorf(api.CodeDestinationRefused, "%s: %s", field, e.Reason)
}

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// IsRefused reports whether err is a fence refusal.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// Target is a destination that passed the fence: the URL and the addresses
// a call may connect to.
type Target struct {
	URL   *url.URL
	Host  string
	Port  string
	Addrs []netip.Addr
}

// String is the destination without path or query, for logs.
func (t *Target) String() string { return t.URL.Scheme + "://" + t.Host }

// Check validates raw and resolves its host once; every answer must pass.
func (f *Fence) Check(ctx context.Context, raw string) (*Target, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return nil, refused("the URL is not absolute (scheme://host/path)")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && f.policy.AllowHTTP:
	case u.Scheme == "http":
		return nil, refused("http:// is not allowed; use https://, or the operator sets APERIO_SCALING_ALLOW_HTTP=1")
	default:
		return nil, refused("scheme %q is not allowed; accepted: https", u.Scheme)
	}
	if u.User != nil {
		return nil, refused("the URL carries credentials; they are never sent")
	}
	host := strings.ToLower(u.Hostname())
	port := u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "http": "80"}[u.Scheme]
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, refused("port %q is not a port number from 1 to 65535", port)
	}
	if host == "" || strings.HasSuffix(host, ".") || strings.ContainsAny(host, "%/\\@ ") {
		return nil, refused("host %q is not a canonical host name or address", host)
	}
	if strings.HasPrefix(host, "[") {
		host = strings.Trim(host, "[]")
	}
	var addrs []netip.Addr
	ip, ipErr := netip.ParseAddr(host)
	if ipErr != nil && numericLooking(host) {
		// 127.1, 2130706433, 0x7f.1, 017700000001: resolvers read these
		// as addresses in forms a reader does not recognise. Only the
		// canonical dotted quad or IPv6 form is accepted.
		return nil, refused("host %q is a number in a non-canonical form; write the address as a dotted quad or an IPv6 address", host)
	}
	if ipErr == nil && ip.Zone() != "" {
		return nil, refused("host %q carries an IPv6 zone; accepted: a host name or an address without a zone", host)
	}
	if ipErr == nil {
		addrs = []netip.Addr{ip}
	} else {
		lookupCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		addrs, err = f.resolver.LookupNetIP(lookupCtx, "ip", host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return nil, refused("host %s does not resolve", host)
		}
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	if err := f.checkPolicy(host, addrs); err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := f.checkAddr(a); err != nil {
			return nil, refused("host %s resolves to %s: %v", host, a, err)
		}
	}
	return &Target{URL: u, Host: host, Port: port, Addrs: addrs}, nil
}

// numericLooking reports whether every dot-separated label of host is a
// number (decimal, octal or 0x hex): no DNS name has an all-numeric top
// label.
func numericLooking(host string) bool {
	labels := strings.Split(host, ".")
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	l := strings.ToLower(last)
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		if l == "" {
			return true
		}
		for _, c := range l {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// checkAddr is the address rule, applied before the call and again at dial.
func (f *Fence) checkAddr(a netip.Addr) error {
	a = a.Unmap()
	internal := f.guard.SafeAddr(a) != nil
	if !internal {
		return nil
	}
	if !f.policy.AllowPrivate {
		return errors.New("an internal address (private, loopback, link-local, metadata or other reserved range); the operator may allow them with APERIO_SCALING_ALLOW_PRIVATE=1")
	}
	if f.policy.BlockPrivate && len(f.policy.Allowlist) == 0 {
		return errors.New("an internal address, and the operator's policy blocks them (APERIO_OUTBOUND_BLOCK_PRIVATE)")
	}
	return nil
}

func (f *Fence) checkPolicy(host string, addrs []netip.Addr) error {
	if len(f.policy.Allowlist) == 0 {
		return nil
	}
	for _, g := range f.globs {
		if ok, _ := path.Match(g, host); ok || g == host {
			return nil
		}
	}
	if len(f.cidrs) > 0 {
		all := true
		for _, a := range addrs {
			in := false
			for _, p := range f.cidrs {
				if p.Contains(a) {
					in = true
					break
				}
			}
			all = all && in
		}
		if all {
			return nil
		}
	}
	return refused("host %s is not in the operator's outbound allowlist (APERIO_OUTBOUND_ALLOWLIST)", host)
}

// Do sends req to the target it was checked as, connecting only to the
// target's addresses. The response is the first one: redirects are not
// followed. A dial refused by the second check is a RefusedError.
func (f *Fence) Do(ctx context.Context, t *Target, req *http.Request) (*http.Response, error) {
	dialer := &net.Dialer{
		Timeout: f.Timeout,
		Control: func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return refused("cannot check the address %q", address)
			}
			if err := f.checkAddr(ap.Addr()); err != nil {
				return refused("%s: %v", ap.Addr(), err)
			}
			return nil
		},
	}
	transport := &http.Transport{
		Proxy:             nil, // never a proxy from the environment
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			// Whatever the address the transport asks for, connect only
			// to the addresses that were checked.
			var last error
			for _, a := range t.Addrs {
				c, err := dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), t.Port))
				if err == nil {
					return c, nil
				}
				last = err
				if IsRefused(err) {
					return nil, err
				}
			}
			return nil, last
		},
		TLSHandshakeTimeout:   f.Timeout,
		ResponseHeaderTimeout: f.Timeout,
	}
	client := &http.Client{
		Transport:     transport,
		Timeout:       f.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req = req.WithContext(ctx)
	req.URL = t.URL
	req.Host = t.URL.Host
	resp, err := client.Do(req)
	if err != nil {
		var r *RefusedError
		if errors.As(err, &r) {
			return nil, r
		}
		// Errors name the scheme and host only: paths and queries may
		// carry tokens.
		return nil, fmt.Errorf("call to %s failed: %w", t, unwrapURLError(err))
	}
	return resp, nil
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
