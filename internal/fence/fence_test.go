package fence

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/qodaperio/autoscale/internal/api"
)

// fakeDNS answers from a table; a name it does not know does not resolve.
type fakeDNS map[string][]string

func (d fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range d[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	if len(out) == 0 {
		return nil, errors.New("no such host")
	}
	return out, nil
}

var dns = fakeDNS{
	"hook.example.com":     {"93.184.216.34"},
	"api.example.com":      {"93.184.216.35"},
	"evil.example.net":     {"93.184.216.36"},
	"loop.example.com":     {"127.0.0.1"},
	"private.example.com":  {"10.1.2.3"},
	"metadata.example.com": {"169.254.169.254"},
	"cgnat.example.com":    {"100.64.0.1"},
	"v6loop.example.com":   {"::1"},
	"ula.example.com":      {"fc00::1"},
	"linklocal6.example":   {"fe80::1"},
	"mapped.example.com":   {"::ffff:10.0.0.1"},
	"mixed.example.com":    {"93.184.216.34", "192.168.1.1"},
	"internal.example.com": {"10.0.0.7"},
}

func check(t *testing.T, p Policy, raw string) error {
	t.Helper()
	f, err := New(p, dns)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Check(context.Background(), raw)
	return err
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		p    Policy
		url  string
		want string
	}{
		{Policy{}, "http://hook.example.com/scale", "http:// is not allowed"},
		{Policy{}, "ftp://hook.example.com/scale", `scheme "ftp" is not allowed`},
		{Policy{}, "/scale", "not absolute"},
		{Policy{}, "https://user:pw@hook.example.com/", "carries credentials"},
		{Policy{}, "https://hook.example.com:0/", `port "0"`},
		{Policy{}, "https://hook.example.com:70000/", `port "70000"`},
		{Policy{}, "https://hook.example.com./", "not a canonical host"},
		{Policy{}, "https://nowhere.example.com/", "does not resolve"},
		{Policy{}, "https://loop.example.com/", "resolves to 127.0.0.1: an internal address"},
		{Policy{}, "https://private.example.com/", "resolves to 10.1.2.3"},
		{Policy{}, "https://metadata.example.com/", "resolves to 169.254.169.254"},
		{Policy{}, "https://cgnat.example.com/", "resolves to 100.64.0.1"},
		{Policy{}, "https://v6loop.example.com/", "resolves to ::1"},
		{Policy{}, "https://ula.example.com/", "resolves to fc00::1"},
		{Policy{}, "https://linklocal6.example/", "resolves to fe80::1"},
		{Policy{}, "https://mapped.example.com/", "resolves to 10.0.0.1"},
		{Policy{}, "https://mixed.example.com/", "resolves to 192.168.1.1"}, // every answer, not the first
		{Policy{}, "https://127.0.0.1/", "resolves to 127.0.0.1"},
		{Policy{}, "https://[::1]:8443/", "resolves to ::1"},
		{Policy{}, "https://169.254.169.254/latest/meta-data", "resolves to 169.254.169.254"},
		{Policy{Allowlist: []string{"*.example.com"}}, "https://evil.example.net/", "not in the operator's outbound allowlist"},
		// An allowlisted name never skips the address check.
		{Policy{Allowlist: []string{"internal.example.com"}}, "https://internal.example.com/", "resolves to 10.0.0.7"},
		{Policy{AllowPrivate: true, BlockPrivate: true}, "https://private.example.com/", "policy blocks them"},
		{Policy{Allowlist: []string{"93.184.216.0/24"}}, "https://mixed.example.com/", "not in the operator's outbound allowlist"},
	}
	for _, c := range cases {
		err := check(t, c.p, c.url)
		if err == nil || !IsRefused(err) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s with %+v: got %v, want a refusal containing %q", c.url, c.p, err, c.want)
		}
	}
}

func TestAccepted(t *testing.T) {
	cases := []struct {
		p   Policy
		url string
	}{
		{Policy{}, "https://hook.example.com/scale?app=web"},
		{Policy{}, "https://HOOK.example.com:8443/scale"},
		{Policy{AllowHTTP: true}, "http://hook.example.com/scale"},
		{Policy{AllowPrivate: true}, "https://private.example.com/"},
		{Policy{Allowlist: []string{"*.example.com"}}, "https://api.example.com/"},
		{Policy{Allowlist: []string{"93.184.216.0/24"}}, "https://hook.example.com/"},
		{Policy{AllowPrivate: true, Allowlist: []string{"internal.example.com"}}, "https://internal.example.com/"},
	}
	for _, c := range cases {
		if err := check(t, c.p, c.url); err != nil {
			t.Errorf("%s with %+v: refused: %v", c.url, c.p, err)
		}
	}
}

func TestRefusalIsTheAPIsDestinationRefused(t *testing.T) {
	err := check(t, Policy{}, "https://metadata.example.com/")
	var r *RefusedError
	if !errors.As(err, &r) {
		t.Fatalf("%v is not a RefusedError", err)
	}
	ae := r.APIError("url")
	if ae.Code != api.CodeDestinationRefused || ae.Status() != 400 || !strings.HasPrefix(ae.Message, "url: host metadata.example.com resolves to 169.254.169.254") {
		t.Fatalf("%+v", ae)
	}
}

// switchDNS answers what it is told to, so a test can rebind a name.
type switchDNS struct{ addr string }

func (d *switchDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr(d.addr)}, nil
}

func TestDoConnectsOnlyToCheckedAddressesAndFollowsNoRedirect(t *testing.T) {
	var got *http.Request
	var gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		http.Redirect(w, r, "http://169.254.169.254/latest/meta-data", http.StatusFound)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	resolver := &switchDNS{addr: "127.0.0.1"}
	f, _ := New(Policy{AllowHTTP: true, AllowPrivate: true}, resolver)
	target, err := f.Check(context.Background(), "http://hook.test:"+u.Port()+"/scale")
	if err != nil {
		t.Fatal(err)
	}
	// The name now points elsewhere (DNS rebinding): the call still goes
	// to the address that was checked, and the proxy is never used.
	resolver.addr = "10.9.9.9"
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	req, _ := http.NewRequest(http.MethodPost, target.URL.String(), strings.NewReader(`{"reason":"cold_start"}`))
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := f.Do(context.Background(), target, req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d: the redirect was followed", resp.StatusCode)
	}
	if got == nil || got.Header.Get("Authorization") != "Bearer s3cret" || got.Host != "hook.test:"+u.Port() ||
		got.URL.Path != "/scale" || gotBody != `{"reason":"cold_start"}` {
		t.Fatalf("the receiver saw %+v with body %q", got, gotBody)
	}
}

// The second check at dial time refuses an address even when a target was
// built without the first (defence in depth).
func TestDialTimeCheck(t *testing.T) {
	f, _ := New(Policy{}, dns)
	u, _ := url.Parse("https://hook.example.com/")
	forged := &Target{URL: u, Host: "hook.example.com", Port: "443", Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
	req, _ := http.NewRequest(http.MethodPost, u.String(), nil)
	_, err := f.Do(context.Background(), forged, req)
	if !IsRefused(err) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("dial to a forged internal address: %v", err)
	}
}

// Errors of a failed call name scheme and host, never the path or query,
// which may carry tokens.
func TestErrorsCarryNoPath(t *testing.T) {
	f, _ := New(Policy{AllowHTTP: true, AllowPrivate: true}, &switchDNS{addr: "127.0.0.1"})
	target, err := f.Check(context.Background(), "http://hook.test:1/scale?token=abc")
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, target.URL.String(), nil)
	_, err = f.Do(context.Background(), target, req)
	if err == nil || strings.Contains(err.Error(), "token=abc") || strings.Contains(err.Error(), "/scale") || !strings.Contains(err.Error(), "http://hook.test") {
		t.Fatalf("error %v", err)
	}
}

// FuzzCheck: whatever the URL, the fence answers a target whose every
// address passes the address rule, or a refusal; never a panic.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{"https://hook.example.com/scale", "http://[::ffff:127.0.0.1]:80/", "https://0x7f.0.0.1/",
		"https://%31%32%37.0.0.1/", "https://mixed.example.com", "https://a@b@c/", "//hook.example.com", "https://[fe80::1%25eth0]/"} {
		f.Add(s)
	}
	fc, _ := New(Policy{}, dns)
	f.Fuzz(func(t *testing.T, raw string) {
		target, err := fc.Check(context.Background(), raw)
		if err != nil {
			if !IsRefused(err) {
				t.Fatalf("%q: error that is not a refusal: %v", raw, err)
			}
			return
		}
		for _, a := range target.Addrs {
			if err := fc.checkAddr(a); err != nil {
				t.Fatalf("%q accepted with %s: %v", raw, a, err)
			}
		}
	})
}
