package fence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// matrixDNS resolves "<address>.ip.test" to that address, and a few names
// to several answers.
type matrixDNS struct{}

func (matrixDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "public-and-private.test":
		return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("10.0.0.1")}, nil
	case "private-and-public.test":
		return []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("93.184.216.34")}, nil
	case "public.test", "api.example.com", "hooks.example.com":
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	case "v6public.test":
		return []netip.Addr{netip.MustParseAddr("2606:2800:220:1:248:1893:25c8:1946")}, nil
	}
	if a, ok := strings.CutSuffix(host, ".ip.test"); ok {
		ip, err := netip.ParseAddr(strings.ReplaceAll(a, "-", ":"))
		if err != nil {
			ip, err = netip.ParseAddr(a)
		}
		if err == nil {
			return []netip.Addr{ip}, nil
		}
	}
	return nil, &netError{}
}

type netError struct{}

func (*netError) Error() string { return "no such host" }

// internalAddrs must never be reached: each is tried as a literal and as a
// name that resolves to it.
var internalAddrs = []string{
	"127.0.0.1", "127.255.255.254", "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.254", "192.168.0.1",
	"192.168.255.255", "169.254.169.254", "169.254.0.1", "100.64.0.1", "100.127.255.254", "0.0.0.0", "0.1.2.3",
	"224.0.0.1", "239.255.255.250", "255.255.255.255", "192.0.0.1", "192.0.2.1", "198.18.0.1", "198.51.100.1",
	"203.0.113.1", "240.0.0.1", "100.100.100.200", // Alibaba's metadata sits in CGNAT
	"::1", "::", "fc00::1", "fd00:ec2::254", "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
	"::ffff:169.254.169.254", "64:ff9b::a00:1", "64:ff9b::7f00:1", "2002:7f00:1::", "2002:a00:1::", "2001:db8::1",
	"100::1", "2001::1", "fec0::1",
}

func TestMatrixRefusesEveryInternalDestination(t *testing.T) {
	f, _ := New(Policy{}, matrixDNS{})
	var urls []string
	for _, a := range internalAddrs {
		lit := a
		if strings.Contains(a, ":") {
			lit = "[" + a + "]"
		}
		urls = append(urls, "https://"+lit+"/scale", "https://"+strings.ReplaceAll(a, ":", "-")+".ip.test/scale")
	}
	urls = append(urls,
		// Non-canonical numeric hosts.
		"https://127.1/", "https://2130706433/", "https://0x7f.0.0.1/", "https://0x7f000001/", "https://017700000001/",
		"https://0177.0.0.1/", "https://10.1/", "https://127.0.0.1.nip.io.0/",
		// Userinfo tricks and what is not a host.
		"https://public.test@127.0.0.1/", "https://user:pass@public.test/", "https://public.test%40127.0.0.1/",
		"https://[::1]%2f@public.test/", "https://[fe80::1%25eth0]/",
		// Schemes.
		"http://public.test/", "ftp://public.test/", "file:///etc/passwd", "gopher://public.test/", "ws://public.test/",
		"javascript:alert(1)", "//public.test/scale", "/scale",
		// Every answer counts, not the first.
		"https://public-and-private.test/", "https://private-and-public.test/",
		// Ports that are not ports.
		"https://public.test:0/", "https://public.test:65536/", "https://public.test:-1/",
	)
	if len(urls) < 60 {
		t.Fatalf("the matrix has %d destinations, want at least 60", len(urls))
	}
	for _, u := range urls {
		_, err := f.Check(context.Background(), u)
		if err == nil || !IsRefused(err) {
			t.Errorf("%s was not refused (%v)", u, err)
		}
	}
	t.Logf("%d destinations refused", len(urls))
}

func TestMatrixPasses(t *testing.T) {
	cases := []struct {
		p   Policy
		url string
	}{
		{Policy{}, "https://public.test/scale"},
		{Policy{}, "https://v6public.test/scale"},
		{Policy{}, "https://93.184.216.34/scale"},
		{Policy{}, "https://[2606:2800:220:1:248:1893:25c8:1946]/scale"},
		{Policy{}, "https://public.test:8443/scale?x=1"},
		{Policy{AllowHTTP: true}, "http://public.test/"},
		{Policy{AllowPrivate: true}, "https://10.0.0.1/"},
		{Policy{AllowPrivate: true}, "https://127.0.0.1.ip.test/"},
		{Policy{AllowPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, "https://10.0.0.1.ip.test/"},
		{Policy{Allowlist: []string{"*.example.com"}}, "https://api.example.com/"},
		{Policy{Allowlist: []string{"hooks.example.com", "*.other.test"}}, "https://hooks.example.com/"},
		{Policy{Allowlist: []string{"93.184.216.0/24"}}, "https://public.test/"},
		{Policy{BlockPrivate: true}, "https://public.test/"},
	}
	for _, c := range cases {
		f, _ := New(c.p, matrixDNS{})
		if _, err := f.Check(context.Background(), c.url); err != nil {
			t.Errorf("%s with %+v: %v", c.url, c.p, err)
		}
	}
	// The interplay: an allowlist does not open internal addresses; with
	// private allowed, block-private still refuses them when there is no
	// allowlist, but an allowlist takes its place.
	refusedCases := []struct {
		p   Policy
		url string
	}{
		{Policy{Allowlist: []string{"10.0.0.0/8"}}, "https://10.0.0.1.ip.test/"},
		{Policy{Allowlist: []string{"*.ip.test"}}, "https://127.0.0.1.ip.test/"},
		{Policy{AllowPrivate: true, BlockPrivate: true}, "https://10.0.0.1.ip.test/"},
		{Policy{Allowlist: []string{"*.example.com"}}, "https://public.test/"},
		{Policy{Allowlist: []string{"example.com"}}, "https://api.example.com/"},
	}
	for _, c := range refusedCases {
		f, _ := New(c.p, matrixDNS{})
		if _, err := f.Check(context.Background(), c.url); !IsRefused(err) {
			t.Errorf("%s with %+v passed", c.url, c.p)
		}
	}
	f, _ := New(Policy{AllowPrivate: true, BlockPrivate: true, Allowlist: []string{"10.0.0.0/8"}}, matrixDNS{})
	if _, err := f.Check(context.Background(), "https://10.0.0.1.ip.test/"); err != nil {
		t.Errorf("an allowlisted internal range with private allowed: %v", err)
	}
}

// Redirects to internal addresses are never followed: the internal server
// sees no request at all, for every redirect status.
func TestRedirectsAreNeverFollowed(t *testing.T) {
	var internalHits atomic.Int64
	internal := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { internalHits.Add(1) }))
	defer internal.Close()
	for _, code := range []int{301, 302, 303, 307, 308} {
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, internal.URL+"/latest/meta-data", code)
		}))
		u, _ := url.Parse(hook.URL)
		f, _ := New(Policy{AllowHTTP: true, AllowPrivate: true}, matrixDNS{})
		target, err := f.Check(context.Background(), "http://127.0.0.1.ip.test:"+u.Port()+"/scale")
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("HTTPS_PROXY", internal.URL)
		t.Setenv("HTTP_PROXY", internal.URL)
		req, _ := http.NewRequest(http.MethodPost, target.URL.String(), nil)
		resp, err := f.Do(context.Background(), target, req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		hook.Close()
		if resp.StatusCode != code {
			t.Fatalf("status %d, want the redirect %d itself", resp.StatusCode, code)
		}
	}
	if n := internalHits.Load(); n != 0 {
		t.Fatalf("the internal server (redirect target and proxy) was hit %d times", n)
	}
}
