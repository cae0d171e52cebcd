package edge

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/qodaperio/autoscale/internal/testwait"
)

type noHooks struct{}

func (noHooks) Hook(string) HookInfo { return HookInfo{} }

// rig is an edge in front of one client at target.
func rig(t *testing.T, target string) (*Proxy, *frontDoor, *Client) {
	t.Helper()
	pools := NewPools(time.Hour, 100)
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	pools.Heartbeat("app.test", "c", ClientInfo{Target: u, State: Active, ProbeOK: true}, HostSettings{}, time.Now())
	p := NewProxy(Options{Pools: pools, Hooks: noHooks{}})
	edge := serveH1(t, p)
	t.Cleanup(edge.Close)
	c, _ := pools.Pick("app.test", time.Now())
	return p, edge, c
}

func send(t *testing.T, edge *frontDoor, method, uri string, body io.Reader, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, edge.URL+uri, body)
	req.Host = "app.test"
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp, string(b)
}

// rawBackend answers each request with the next of answers, written as
// they are, and closes the connection after it.
func rawBackend(t *testing.T, answers ...string) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var conns atomic.Int64
	var next atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufio.NewReader(c))
				if err != nil {
					return
				}
				io.Copy(io.Discard, req.Body)
				if i := int(next.Add(1)) - 1; i < len(answers) {
					io.WriteString(c, answers[i])
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &conns
}

func TestDirectPathFraming(t *testing.T) {
	cases := []struct {
		name, answer, wantBody string
		wantStatus             int
		wantHeader             map[string]string
		method                 string
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello", "hello", 200, map[string]string{"X-A": "1", "Content-Length": "5"}, "GET"},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\nX-Sum: 9\r\n\r\n", "abcde", 200, nil, "GET"},
		{"interim answers skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", "ok", 201, map[string]string{"Link": ""}, "GET"},
		{"hop-by-hop dropped", "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nX-Kept: k\r\nContent-Length: 0\r\n\r\n", "", 200, map[string]string{"X-Secret": "", "Keep-Alive": "", "X-Kept": "k"}, "GET"},
		{"until close", "HTTP/1.0 200 OK\r\n\r\nstream until close", "stream until close", 200, nil, "GET"},
		{"head has no body", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", "", 200, nil, "HEAD"},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", "", 204, nil, "GET"},
		{"repeated values", "HTTP/1.1 200 OK\r\nVary: a\r\nVary: b\r\nContent-Length: 0\r\n\r\n", "", 200, map[string]string{"Vary": "a"}, "GET"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target, _ := rawBackend(t, tc.answer)
			_, edge, _ := rig(t, target)
			resp, body := send(t, edge, tc.method, "/", nil, nil)
			if resp.StatusCode != tc.wantStatus || body != tc.wantBody {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			for k, v := range tc.wantHeader {
				if got := resp.Header.Get(k); got != v {
					t.Fatalf("header %s = %q, want %q (all: %v)", k, got, v, resp.Header)
				}
			}
			if tc.name == "chunked with trailer" && resp.Trailer.Get("X-Sum") != "9" {
				t.Fatalf("trailer lost: %v", resp.Trailer)
			}
			if tc.name == "repeated values" && len(resp.Header["Vary"]) != 2 {
				t.Fatalf("Vary: %q", resp.Header["Vary"])
			}
		})
	}
}

// A client answering garbage gets the visitor a clean 502, never a half
// answer or a panic.
func TestDirectPathRefusesMalformedAnswers(t *testing.T) {
	for name, answer := range map[string]string{
		"not http":           "SSH-2.0-OpenSSH\r\n\r\n",
		"bad status":         "HTTP/1.1 2x0 OK\r\n\r\n",
		"folded header":      "HTTP/1.1 200 OK\r\nX-A: 1\r\n  folded\r\nContent-Length: 0\r\n\r\n",
		"conflicting length": "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
		"negative length":    "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"gzip coding":        "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
		"bad header name":    "HTTP/1.1 200 OK\r\nX A: 1\r\nContent-Length: 0\r\n\r\n",
		"switching":          "HTTP/1.1 101 Switching Protocols\r\n\r\n",
		"huge head":          "HTTP/1.1 200 OK\r\nX-A: " + strings.Repeat("a", 2<<20) + "\r\n\r\n",
		"nothing":            "",
	} {
		t.Run(name, func(t *testing.T) {
			target, _ := rawBackend(t, answer)
			_, edge, _ := rig(t, target)
			resp, body := send(t, edge, "GET", "/", nil, nil)
			if resp.StatusCode != 502 || !strings.Contains(body, "failed to answer") || resp.Header.Get("X-A") != "" {
				t.Fatalf("%d %v %q", resp.StatusCode, resp.Header, body)
			}
		})
	}
}

// The request goes up as the visitor sent it: path joined to the target's,
// query kept, Host kept, hop-by-hop and spoofed forwarding headers replaced,
// bodies of known and unknown length streamed whole; connections are kept.
func TestDirectPathRequest(t *testing.T) {
	var conns atomic.Int64
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s %s host=%s xff=%s xfh=%s xfp=%s conn=%q secret=%q te=%v len=%d body=%d",
			r.Method, r.URL.RequestURI(), r.Proto, r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Host"),
			r.Header.Get("X-Forwarded-Proto"), r.Header.Get("Connection"), r.Header.Get("X-Secret"), r.TransferEncoding, r.ContentLength, len(b))
	}))
	backend.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	backend.Start()
	defer backend.Close()
	_, edge, _ := rig(t, backend.URL+"/base/")
	_, body := send(t, edge, "GET", "/a%20b/c?x=1&y=%2F", nil, map[string]string{"X-Forwarded-For": "6.6.6.6", "Connection": "X-Secret", "X-Secret": "s"})
	want := "GET /base/a%20b/c?x=1&y=%2F HTTP/1.1 host=app.test xff=127.0.0.1 xfh=app.test xfp=http conn=\"\" secret=\"\" te=[] len=0 body=0"
	if body != want {
		t.Fatalf("got  %s\nwant %s", body, want)
	}
	big := strings.Repeat("x", 1<<20)
	if _, body := send(t, edge, "POST", "/up", strings.NewReader(big), nil); !strings.HasSuffix(body, "len=1048576 body=1048576") {
		t.Fatalf("known length: %s", body)
	}
	pr, pw := io.Pipe()
	go func() {
		for range 100 {
			pw.Write([]byte(strings.Repeat("y", 1000)))
		}
		pw.Close()
	}()
	if _, body := send(t, edge, "PUT", "/up", pr, nil); !strings.HasSuffix(body, "te=[chunked] len=-1 body=100000") {
		t.Fatalf("unknown length: %s", body)
	}
	for range 20 {
		send(t, edge, "GET", "/again", nil, nil)
	}
	if n := conns.Load(); n > 3 {
		t.Fatalf("%d connections to the client for 23 sequential requests: keep-alive is not working", n)
	}
}

// A kept connection the client closed while idle is retried once, fresh,
// for a request without a body.
func TestDirectPathRetriesAConnectionClosedWhileIdle(t *testing.T) {
	backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	backend.Start()
	defer backend.Close()
	_, edge, c := rig(t, backend.URL)
	if _, body := send(t, edge, "GET", "/", nil, nil); body != "ok" {
		t.Fatal(body)
	}
	backend.CloseClientConnections() // the kept connection dies while idle
	kept := 0
	for i := range c.idle {
		c.idle[i].mu.Lock()
		kept += len(c.idle[i].conns)
		c.idle[i].mu.Unlock()
	}
	if kept != 1 {
		t.Fatalf("%d connections kept, want 1", kept)
	}
	if resp, body := send(t, edge, "GET", "/", nil, nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("after the client closed the kept connection: %d %q", resp.StatusCode, body)
	}
}

// A visitor who leaves frees the client's permit as soon as the front door
// notices (h1 watches a request once it has run 20 ms), even while the
// client has not answered.
func TestDirectPathVisitorLeaving(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
	}))
	defer backend.Close()
	defer close(release)
	_, edge, c := rig(t, backend.URL)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", edge.URL+"/slow", nil)
	req.Host = "app.test"
	errc := make(chan error, 1)
	go func() { _, err := http.DefaultClient.Do(req); errc <- err }()
	<-entered
	if c.Limiter().InUse() != 1 {
		t.Fatalf("in use: %d", c.Limiter().InUse())
	}
	cancel()
	<-errc
	testwait.For(t, "the permit of the visitor who left to be released", func() bool { return c.Limiter().InUse() == 0 })
}

// A stream of unknown length reaches the visitor piece by piece.
func TestDirectPathStreams(t *testing.T) {
	next := make(chan struct{})
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			<-next
		}
	}))
	defer backend.Close()
	_, edge, _ := rig(t, backend.URL)
	req, _ := http.NewRequest("GET", edge.URL+"/events", nil)
	req.Host = "app.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("data: %d\n", i) {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		br.ReadString('\n')
		next <- struct{}{}
	}
}

// A client that fails before answering sends the visitor down the same
// chain as a spent budget, on both paths: here, the fallback redirect.
func TestUpstreamFailureFallsThrough(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL, _ := url.Parse(dead.URL)
	dead.Close()
	pools := NewPools(time.Hour, 100)
	pools.Heartbeat("app.test", "c", ClientInfo{Target: deadURL, State: Active, ProbeOK: true}, HostSettings{Fallback: "https://status.example.com/"}, time.Now())
	edge := serveH1(t, NewProxy(Options{Pools: pools, Hooks: noHooks{}}))
	defer edge.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, upgrade := range []bool{false, true} { // the direct path, then the reverse proxy's
		req, _ := http.NewRequest("GET", edge.URL+"/", nil)
		req.Host = "app.test"
		if upgrade {
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 302 || resp.Header.Get("Location") != "https://status.example.com/" {
			t.Fatalf("upgrade=%v: %d %v", upgrade, resp.StatusCode, resp.Header)
		}
	}
}

// An upgrade (a WebSocket, say) goes through: the 101 reaches the visitor,
// and then bytes flow both ways over the connection the front door handed
// over.
func TestUpgradeIsTunnelled(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, "upgrade expected", 400)
			return
		}
		nc, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer nc.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			rw.WriteString("echo: " + line)
			rw.Flush()
		}
	}))
	defer backend.Close()
	_, edge, _ := rig(t, backend.URL)
	nc, err := net.Dial("tcp", edge.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: app.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade answer: %v %v", resp, err)
	}
	for _, msg := range []string{"one\n", "two\n"} {
		io.WriteString(nc, msg)
		if got, err := br.ReadString('\n'); got != "echo: "+msg {
			t.Fatalf("through the tunnel: %q, %v", got, err)
		}
	}
}

// A visitor whose body breaks off (here it hangs up halfway) ends the
// exchange: the client is not left waiting for the rest.
func TestABrokenOffBodyEndsTheExchange(t *testing.T) {
	backendErr := make(chan error, 1)
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		backendErr <- err
	}))
	defer backend.Close()
	_, edge, c := rig(t, backend.URL)
	nc, err := net.Dial("tcp", edge.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(nc, "POST /upload HTTP/1.1\r\nHost: app.test\r\nContent-Length: 10\r\n\r\nabc")
	testwait.For(t, "the request at the client", func() bool { return c.Limiter().InUse() == 1 })
	nc.Close()
	select {
	case err := <-backendErr:
		if err == nil {
			t.Fatal("the client read a whole body the visitor never sent")
		}
	case <-time.After(testwait.Bound):
		t.Fatal("the client is still waiting for the rest of the body")
	}
	testwait.For(t, "the permit released", func() bool { return c.Limiter().InUse() == 0 })
}
