package edge

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"testing"
)

// FuzzReadResponseHead feeds a client's answer, hostile or broken, to the
// edge's reader: it never panics, never reads past the framing it found, and
// never lets a hop-by-hop header through.
func FuzzReadResponseHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-Sum: 9\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 200 OK\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 999 ?\r\nKeep-Alive: 1\r\nUpgrade: x\r\n\r\n",
		"HTTP/1.1 200\n\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		br := bufio.NewReaderSize(bytes.NewReader(raw), 4<<10)
		h := http.Header{}
		rh, err := readResponseHead(br, h, method)
		if err != nil {
			return
		}
		if rh.status < 100 || rh.status > 999 || (rh.status < 200 && rh.status != 101) {
			t.Fatalf("status %d passed", rh.status)
		}
		for _, k := range []string{"Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te", "Trailer", "Proxy-Connection"} {
			if _, ok := h[k]; ok {
				t.Fatalf("hop-by-hop %s passed: %v", k, h)
			}
		}
		var body bodyReader
		body.reset(br, rh)
		n, err := io.Copy(io.Discard, io.LimitReader(&body, int64(len(raw))+1))
		if rh.length >= 0 && !rh.chunked && err == nil && n != rh.length {
			t.Fatalf("read %d bytes of a body of %d", n, rh.length)
		}
		if n > int64(len(raw)) {
			t.Fatalf("read %d bytes out of %d", n, len(raw))
		}
		if method == http.MethodHead && n != 0 {
			t.Fatalf("a HEAD answer had a body of %d", n)
		}
		if rh.chunked && err == nil {
			readTrailers(br)
		}
	})
}
