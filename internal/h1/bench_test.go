package h1

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkServe is one keep-alive request and its answer over loopback,
// served by h1 and, for comparison, by net/http, with the same handler (a
// proxy-like one: headers set, a short body of known length).
//
//	go test -run '^$' -bench Serve -benchmem ./internal/h1
func BenchmarkServe(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Header()["Content-Length"] = []string{"13"}
		io.WriteString(w, "hello, edge!\n")
	})
	for _, tc := range []struct {
		name  string
		serve func(net.Listener) func()
	}{
		{"h1", func(ln net.Listener) func() {
			s := &Server{Handler: h}
			go s.Serve(ln)
			return func() { s.Close() }
		}},
		{"net-http", func(ln net.Listener) func() {
			s := &http.Server{Handler: h}
			go s.Serve(ln)
			return func() { s.Close() }
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer tc.serve(ln)()
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			req := []byte("GET /path?q=1 HTTP/1.1\r\nHost: app.test\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			for b.Loop() {
				if _, err := nc.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
