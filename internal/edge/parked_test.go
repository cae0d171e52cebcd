package edge

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/clock"
	"github.com/qodaperio/autoscale/internal/testwait"
)

// A held request without a body is parked: its connection taken over from
// the server, answered once a client is up, with Connection: close; a HEAD
// gets no body; one whose budget runs out gets 504 on the same connection.
func TestParkedRequests(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	pools := NewPools(time.Hour, 100)
	p := NewProxy(Options{Pools: pools, Hooks: armedFor("sleepy.test"), Clock: clk})
	edge := serveH1(t, p)
	defer edge.Close()
	defer clk.Advance(2 * time.Hour)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Path", r.URL.Path)
		fmt.Fprintf(w, "served %s %s", r.Method, r.URL.RequestURI())
	}))
	defer backend.Close()
	send := func(req string) *bufio.Reader {
		c, err := net.Dial("tcp", edge.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, req)
		return bufio.NewReader(c)
	}
	get := send("GET /a?b=1 HTTP/1.1\r\nHost: sleepy.test\r\n\r\n")
	head := send("HEAD /h HTTP/1.1\r\nHost: sleepy.test\r\n\r\n")
	testwait.For(t, "two held requests", func() bool { return pools.Held("sleepy.test") == 2 })
	u, _ := url.Parse(backend.URL)
	pools.Heartbeat("sleepy.test", "c", ClientInfo{Target: u, State: Active, ProbeOK: true}, HostSettings{}, clk.Now())
	resp, err := http.ReadResponse(get, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "served GET /a?b=1" || !resp.Close || resp.Header.Get("X-Path") != "/a" {
		t.Fatalf("%d %q close=%v %v", resp.StatusCode, body, resp.Close, resp.Header)
	}
	if _, err := get.ReadByte(); err != io.EOF {
		t.Fatalf("the connection stayed open after Connection: close: %v", err)
	}
	hresp, err := http.ReadResponse(head, &http.Request{Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(hresp.Body); hresp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("HEAD: %d %q", hresp.StatusCode, b)
	}
	if rest, _ := io.ReadAll(head); len(rest) != 0 {
		t.Fatalf("a HEAD answer carried a body: %q", rest)
	}

	// The client drains first: a request that arrived before would be
	// served, not held.
	pools.Heartbeat("sleepy.test", "c", ClientInfo{Target: u, State: Draining, ProbeOK: true}, HostSettings{}, clk.Now())
	late := send("GET /late HTTP/1.1\r\nHost: sleepy.test\r\n\r\n")
	testwait.For(t, "the late request held", func() bool { return pools.Held("sleepy.test") == 1 })
	testwait.For(t, "its budget timer", func() bool { return clk.Waiters() > 0 })
	clk.Advance(time.Hour)
	resp, err = http.ReadResponse(late, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 504 || !strings.Contains(string(body), "did not start within 1h0m0s") || pools.Held("sleepy.test") != 0 {
		t.Fatalf("%d %q, %d still held", resp.StatusCode, body, pools.Held("sleepy.test"))
	}
}
