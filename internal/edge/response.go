package edge

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"strconv"
	"strings"
)

// A client's answer is read here rather than by http.ReadResponse: the
// headers go straight into the visitor's header map, with no Response, no
// intermediate map and no reader chain, which is a third of the allocations
// of a proxied request.

// maxResponseHead bounds a client's status line and headers together.
const maxResponseHead = 1 << 20

var errHeadTooLarge = errors.New("the client's answer headers exceed 1 MiB")

// respHead is what the status line and headers say about the answer.
type respHead struct {
	status  int
	close   bool  // the connection ends with this answer
	chunked bool  // the body is chunked
	length  int64 // the body's length; -1 until the connection closes
}

// readLine reads one header line without its CRLF. It may return a slice of
// br's buffer, valid until the next read.
func readLine(br *bufio.Reader, budget *int) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		long := append([]byte(nil), line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			if len(long) > *budget {
				return nil, errHeadTooLarge
			}
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		line = long
	}
	if err != nil {
		if err == io.EOF && len(line) > 0 {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if *budget -= len(line); *budget < 0 {
		return nil, errHeadTooLarge
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// commonKeys are header names already in canonical form, so that reading
// them allocates nothing.
var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"Accept-Ranges", "Age", "Cache-Control", "Connection", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Type", "Date", "Etag", "Expires", "Keep-Alive",
		"Last-Modified", "Location", "Server", "Set-Cookie", "Trailer", "Transfer-Encoding", "Vary",
		"X-Content-Type-Options", "X-Frame-Options", "Strict-Transport-Security", "Content-Security-Policy",
		"Access-Control-Allow-Origin", "Retry-After", "Www-Authenticate", "Upgrade", "Proxy-Authenticate"} {
		m[k] = k
		m[strings.ToLower(k)] = k
	}
	return m
}()

func canonicalKey(b []byte) (string, bool) {
	if k, ok := commonKeys[string(b)]; ok {
		return k, true
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return "", false
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(b)), true
}

// readResponseHead reads the status line and headers of a client's answer,
// skipping interim (1xx) answers. End-to-end headers go into h; hop-by-hop
// ones, and those the Connection header names, are left out.
func readResponseHead(br *bufio.Reader, h http.Header, method string) (respHead, error) {
	budget := maxResponseHead
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return respHead{}, err
		}
		rh, err := parseStatusLine(line)
		if err != nil {
			return respHead{}, err
		}
		if rh.status >= 100 && rh.status < 200 && rh.status != http.StatusSwitchingProtocols {
			if err := skipHeaders(br, &budget); err != nil {
				return respHead{}, err
			}
			continue // 100 Continue, 103 Early Hints: the real answer follows
		}
		if rh.status == http.StatusSwitchingProtocols {
			return respHead{}, errors.New("the client switched protocols on a request that did not ask to")
		}
		return readHeaders(br, h, rh, method, &budget)
	}
}

func parseStatusLine(line []byte) (respHead, error) {
	var rh respHead
	proto, rest, ok := bytes.Cut(line, []byte{' '})
	switch {
	case !ok:
		return rh, fmt.Errorf("malformed status line %q", clipBytes(line))
	case bytes.Equal(proto, []byte("HTTP/1.1")):
	case bytes.Equal(proto, []byte("HTTP/1.0")):
		rh.close = true // unless it says keep-alive, below
	default:
		return rh, fmt.Errorf("unsupported protocol %q", clipBytes(proto))
	}
	code, _, _ := bytes.Cut(rest, []byte{' '})
	if len(code) != 3 {
		return rh, fmt.Errorf("malformed status code %q", clipBytes(code))
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return rh, fmt.Errorf("malformed status code %q", clipBytes(code))
		}
	}
	rh.status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if rh.status < 100 {
		return rh, fmt.Errorf("status code %d is not accepted", rh.status)
	}
	rh.length = -1
	return rh, nil
}

func skipHeaders(br *bufio.Reader, budget *int) error {
	for {
		line, err := readLine(br, budget)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
	}
}

func readHeaders(br *bufio.Reader, h http.Header, rh respHead, method string, budget *int) (respHead, error) {
	var (
		lengths  []string
		te       string
		conn     []string
		keepOpen bool
		values   = make([]string, 0, 16) // one backing array for most answers
	)
	for {
		line, err := readLine(br, budget)
		if err != nil {
			return rh, err
		}
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			return rh, errors.New("obsolete header line folding in the client's answer")
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		if !ok {
			return rh, fmt.Errorf("malformed header line %q", clipBytes(line))
		}
		key, ok := canonicalKey(k)
		if !ok {
			return rh, fmt.Errorf("malformed header name %q", clipBytes(k))
		}
		val := string(bytes.TrimSpace(v))
		switch key {
		case "Content-Length":
			lengths = append(lengths, val)
			continue // set below, from the framing actually used
		case "Transfer-Encoding":
			te = val
			continue
		case "Connection":
			for _, f := range strings.Split(val, ",") {
				f = strings.TrimSpace(f)
				switch {
				case strings.EqualFold(f, "close"):
					rh.close = true
				case strings.EqualFold(f, "keep-alive"):
					keepOpen = true
				case f != "":
					conn = append(conn, http.CanonicalHeaderKey(f))
				}
			}
			continue
		case "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Te", "Trailer", "Upgrade":
			continue
		}
		if len(values) == cap(values) {
			values = make([]string, 0, 16)
		}
		values = append(values, val)
		if old := h[key]; old != nil {
			h[key] = append(old, val)
		} else {
			h[key] = values[len(values)-1 : len(values) : len(values)]
		}
	}
	for _, k := range conn {
		h.Del(k)
	}
	if keepOpen && rh.close && len(conn) == 0 {
		rh.close = false // HTTP/1.0 with Connection: keep-alive
	}
	noBody := method == http.MethodHead || rh.status == http.StatusNoContent || rh.status == http.StatusNotModified
	switch {
	case te != "":
		if !strings.EqualFold(te, "chunked") {
			return rh, fmt.Errorf("transfer coding %q is not accepted; accepted: chunked", clip(te))
		}
		rh.chunked = !noBody
	case len(lengths) > 0:
		n, err := strconv.ParseInt(lengths[0], 10, 64)
		if err != nil || n < 0 || strings.HasPrefix(lengths[0], "+") {
			return rh, fmt.Errorf("malformed Content-Length %q", clip(lengths[0]))
		}
		for _, l := range lengths[1:] {
			if l != lengths[0] {
				return rh, errors.New("conflicting Content-Length headers")
			}
		}
		rh.length = n
		h["Content-Length"] = lengths[:1]
	}
	if noBody {
		rh.length, rh.chunked = 0, false
	}
	if rh.length < 0 && !rh.chunked {
		rh.close = true // the body ends when the connection does
	}
	return rh, nil
}

// bodyReader reads the answer's body as its head framed it.
type bodyReader struct {
	br      *bufio.Reader
	left    int64     // for a known length
	chunked io.Reader // for a chunked body
	toClose bool      // until the connection closes
}

func (b *bodyReader) reset(br *bufio.Reader, rh respHead) {
	*b = bodyReader{br: br, left: rh.length}
	switch {
	case rh.chunked:
		b.chunked = httputil.NewChunkedReader(br)
	case rh.length < 0:
		b.toClose = true
	}
}

func (b *bodyReader) Read(p []byte) (int, error) {
	switch {
	case b.chunked != nil:
		n, err := b.chunked.Read(p)
		if err == io.EOF {
			return n, io.EOF
		}
		return n, err
	case b.toClose:
		return b.br.Read(p)
	}
	if b.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.br.Read(p)
	b.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// readTrailers reads what follows a chunked body's last chunk: trailer
// fields, then an empty line.
func readTrailers(br *bufio.Reader) (http.Header, error) {
	budget := maxResponseHead
	var tr http.Header
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			return tr, nil
		}
		k, v, ok := bytes.Cut(line, []byte{':'})
		key, kok := canonicalKey(k)
		if !ok || !kok {
			return nil, fmt.Errorf("malformed trailer line %q", clipBytes(line))
		}
		if tr == nil {
			tr = http.Header{}
		}
		tr.Add(key, string(bytes.TrimSpace(v)))
	}
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func clipBytes(b []byte) string { return clip(string(b)) }
