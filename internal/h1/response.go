package h1

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
)

// smallAnswer is how much of an answer is held back before its head goes
// out, so that a short answer written in one go by a handler that did not
// say its length still gets a Content-Length instead of chunks.
const smallAnswer = 2 << 10

// response is the http.ResponseWriter of one request. It writes into the
// connection's buffer: the head when the first body bytes go out (or the
// handler ends, or flushes), then the body, delimited by the handler's
// Content-Length, by chunks, or (HTTP/1.0) by the connection closing.
type response struct {
	c      *conn
	req    *http.Request
	header http.Header
	body   *requestBody

	status   int // the final status; 0 until WriteHeader or the first Write
	headSent bool
	hijacked bool
	// closeAfter: the connection ends with this answer.
	closeAfter bool
	noBody     bool // HEAD, 1xx, 204, 304: nothing after the head
	chunked    bool
	declared   int64 // the Content-Length the head gave; -1 none
	written    int64 // body bytes the handler wrote
	held       []byte
	failed     error // a write to the connection failed

	// headMu keeps an interim 100 Continue, sent from whoever reads the
	// body, from crossing the head.
	headMu sync.Mutex
}

var (
	// ErrContentLength is returned when a handler writes more than the
	// Content-Length it gave.
	ErrContentLength = http.ErrContentLength
	errHijacked      = http.ErrHijacked
)

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(code int) {
	if w.hijacked || w.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		panic("h1: invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		w.interim(code)
		return
	}
	w.status = code
}

// interim sends a 1xx answer at once, with the headers set so far.
func (w *response) interim(code int) {
	w.headMu.Lock()
	defer w.headMu.Unlock()
	if w.headSent || !w.req.ProtoAtLeast(1, 1) {
		return // an HTTP/1.0 visitor would not know what to make of it
	}
	bw := w.c.bw
	WriteHead(bw, code, w.header)
	if err := bw.Flush(); err != nil {
		w.failed = err
	}
}

func (w *response) Write(p []byte) (int, error) {
	if w.hijacked {
		return 0, errHijacked
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if !w.headSent {
		if _, cl := w.header["Content-Length"]; !cl && len(w.held)+len(p) <= smallAnswer && !bodyless(w.req, w.status) {
			w.held = append(w.held, p...)
			w.written += int64(len(p))
			return len(p), nil
		}
		if err := w.sendHead(false); err != nil {
			return 0, err
		}
	}
	if w.noBody {
		w.written += int64(len(p))
		return len(p), nil
	}
	if w.declared >= 0 && w.written+int64(len(p)) > w.declared {
		return 0, ErrContentLength
	}
	w.written += int64(len(p))
	return w.writeBody(p)
}

func (w *response) writeBody(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if err == nil && w.chunked {
		_, err = bw.WriteString("\r\n")
	}
	if err != nil {
		w.failed = err
	}
	return n, err
}

func bodyless(req *http.Request, status int) bool {
	return req.Method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified ||
		(status >= 100 && status < 200)
}

// sendHead writes the status line and headers, having settled how the body
// is delimited; final says the handler has ended, so what it wrote (held)
// is the whole body.
func (w *response) sendHead(final bool) error {
	w.headMu.Lock()
	defer w.headMu.Unlock()
	w.headSent = true
	if w.status == 0 {
		w.status = http.StatusOK
	}
	h, req := w.header, w.req
	w.noBody = bodyless(req, w.status)
	if cl, ok := h["Content-Length"]; ok {
		n, err := strconv.ParseInt(textproto.TrimString(firstOf(cl)), 10, 64)
		if err != nil || n < 0 || len(cl) != 1 {
			delete(h, "Content-Length") // not a length: the body is delimited another way
		} else {
			w.declared = n
		}
	}
	switch {
	case w.status == http.StatusNoContent || w.status == http.StatusSwitchingProtocols:
		delete(h, "Content-Length")
		delete(h, "Transfer-Encoding")
		w.closeAfter = w.closeAfter || w.status == http.StatusSwitchingProtocols // not hijacked: nothing more to say
	case w.noBody:
		delete(h, "Transfer-Encoding")
		if w.declared < 0 && final && req.Method == http.MethodHead && w.written > 0 {
			h["Content-Length"] = []string{strconv.FormatInt(w.written, 10)}
		}
	case w.declared >= 0:
		delete(h, "Transfer-Encoding")
	case final:
		h["Content-Length"] = []string{strconv.Itoa(len(w.held))}
		delete(h, "Transfer-Encoding")
	case req.ProtoAtLeast(1, 1):
		w.chunked = true
		h["Transfer-Encoding"] = []string{"chunked"}
	default:
		delete(h, "Transfer-Encoding")
		w.closeAfter = true // an HTTP/1.0 body of unknown length ends with the connection
	}
	if !req.ProtoAtLeast(1, 1) || req.Close || w.c.srv.shutting.Load() || headerSaysClose(h) {
		w.closeAfter = true
	}
	if b := w.body; b != nil && !b.done() {
		// The request body is not all read. Up to maxUnreadBody of it is
		// read away after the answer; beyond that, or of unknown length,
		// or never asked for (a 100-continue not sent), the connection ends.
		if b.expect && !b.continued.Load() || b.broken.Load() || b.length < 0 || b.length-b.read.Load() > maxUnreadBody {
			w.closeAfter = true
		}
	}
	if w.closeAfter {
		h["Connection"] = []string{"close"}
		delete(h, "Keep-Alive")
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{httpDate(time.Now())}
	}
	bw := w.c.bw
	_, err := WriteHead(bw, w.status, h)
	if len(w.held) > 0 && err == nil {
		held := w.held
		w.held = nil
		if !w.noBody {
			_, err = w.writeBody(held)
		}
	}
	if err != nil {
		w.failed = err
	}
	return err
}

func firstOf(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

func headerSaysClose(h http.Header) bool {
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "close") {
				return true
			}
		}
	}
	return false
}

func writeStatusLine(bw *bufio.Writer, code int) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		bw.WriteString(text)
	} else {
		bw.WriteString("status code ")
		bw.WriteString(strconv.Itoa(code))
	}
	bw.WriteString("\r\n")
}

// WriteHead writes an answer's status line and headers and the blank line
// after them: HTTP/1.1, h without its trailers (they go after a chunked
// body) and without names that are not tokens, each value by
// WriteHeaderLine. The edge answers parked requests with it too.
func WriteHead(bw *bufio.Writer, code int, h http.Header) (int, error) {
	writeStatusLine(bw, code)
	for k, vv := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range vv {
			WriteHeaderLine(bw, k, v)
		}
	}
	return bw.WriteString("\r\n")
}

// WriteHeaderLine writes one header line, trimmed, with any line break or
// NUL in the value turned into a space, so that no value can start a
// header (or a message) of its own.
func WriteHeaderLine(bw *bufio.Writer, k, v string) {
	bw.WriteString(k)
	bw.WriteString(": ")
	v = textproto.TrimString(v)
	if strings.ContainsAny(v, "\r\n\x00") {
		v = strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' || r == 0 {
				return ' '
			}
			return r
		}, v)
	}
	bw.WriteString(v)
	bw.WriteString("\r\n")
}

// trailers are the values to send after a chunked body: those set under
// http.TrailerPrefix, and those the head announced in Trailer.
func (w *response) writeTrailers(bw *bufio.Writer) {
	for k, vv := range w.header {
		if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && httpguts.ValidHeaderFieldName(name) {
			for _, v := range vv {
				WriteHeaderLine(bw, name, v)
			}
		}
	}
	for _, v := range w.header["Trailer"] {
		for _, name := range strings.Split(v, ",") {
			name = http.CanonicalHeaderKey(textproto.TrimString(name))
			if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidTrailerHeader(name) {
				continue
			}
			for _, v := range w.header[name] {
				WriteHeaderLine(bw, name, v)
			}
		}
	}
}

// Flush sends the head (if not yet sent) and whatever is buffered.
func (w *response) Flush() { _ = w.FlushError() }

func (w *response) FlushError() error {
	if w.hijacked {
		return errHijacked
	}
	if w.failed != nil {
		return w.failed
	}
	if !w.headSent {
		if err := w.sendHead(false); err != nil {
			return err
		}
	}
	if err := w.c.bw.Flush(); err != nil {
		w.failed = err
		return err
	}
	return nil
}

// finish completes the answer once the handler has returned, and reports
// whether it all went out.
func (w *response) finish() bool {
	if w.failed != nil {
		return false
	}
	if !w.headSent {
		if w.sendHead(true) != nil {
			return false
		}
	}
	bw := w.c.bw
	if w.chunked {
		bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		bw.WriteString("\r\n")
	}
	if w.declared >= 0 && !w.noBody && w.written != w.declared {
		// The handler wrote less than it said: the visitor would wait for
		// the rest forever, so the connection ends here.
		w.closeAfter = true
	}
	if err := bw.Flush(); err != nil {
		w.failed = err
		return false
	}
	return true
}

// Hijack hands the connection over: the caller reads and writes it from
// now on, through the returned buffers (which may hold bytes already read).
func (w *response) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.hijacked {
		return nil, nil, errHijacked
	}
	c := w.c
	if w.headSent {
		if err := c.bw.Flush(); err != nil {
			return nil, nil, err
		}
	}
	c.cr.endRequest()
	c.nc.SetReadDeadline(time.Time{}) // a body's, if one was being read
	w.hijacked = true
	c.hijacked = true
	return c.nc, bufio.NewReadWriter(c.br, c.bw), nil
}

// requestBody is the request body the handler reads: it sends 100 Continue
// on the first read when the visitor asked for it, and tells the watch when
// the body has been read to its end. Close does not read the rest (the
// body http.ReadRequest gives would, without limit); the server reads away
// a bounded remainder itself after the answer.
type requestBody struct {
	rc     io.ReadCloser
	w      *response
	expect bool
	length int64 // -1 chunked

	read      atomic.Int64
	eof       atomic.Bool
	continued atomic.Bool
	closed    atomic.Bool
	broken    atomic.Bool // a read failed: the rest cannot be found
}

func (b *requestBody) done() bool {
	return b.eof.Load() || (b.length >= 0 && b.read.Load() >= b.length)
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, http.ErrBodyReadAfterClose
	}
	if b.eof.Load() {
		return 0, io.EOF
	}
	if b.expect && !b.continued.Load() {
		b.continued.Store(true)
		w := b.w
		w.headMu.Lock()
		if !w.headSent && !w.hijacked {
			bw := w.c.bw
			bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
			bw.Flush()
		}
		w.headMu.Unlock()
	}
	c := b.w.c
	// A visitor who stops sending the body it announced ends the request
	// after BodyTimeout, rather than holding the handler (and the permit
	// it holds) forever.
	c.nc.SetReadDeadline(time.Now().Add(c.srv.BodyTimeout))
	n, err := b.rc.Read(p)
	b.read.Add(int64(n))
	if err != nil && err != io.EOF {
		b.broken.Store(true) // a timeout, a malformed chunk: the connection is out of step
	}
	if err == io.EOF || (err == nil && b.length >= 0 && b.read.Load() >= b.length) {
		if !b.eof.Swap(true) {
			c.nc.SetReadDeadline(time.Time{}) // before the watch may read
			c.cr.bodyRead()
		}
	}
	return n, err
}

func (b *requestBody) Close() error {
	b.closed.Store(true)
	return nil
}

// drain reads away what the handler left of the body, up to maxUnreadBody,
// and reports whether the connection can go on.
func (b *requestBody) drain(c *conn) bool {
	if b.expect && !b.continued.Load() || b.broken.Load() {
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(c.srv.ReadHeaderTimeout))
	defer c.nc.SetReadDeadline(time.Time{})
	n, err := io.CopyN(io.Discard, b.rc, maxUnreadBody+1)
	return errors.Is(err, io.EOF) && n <= maxUnreadBody
}

// httpDate formats t for a Date header, once per second.
func httpDate(t time.Time) string {
	sec := t.Unix()
	if d := lastDate.Load(); d != nil && d.sec == sec {
		return d.text
	}
	d := &dateText{sec: sec, text: t.UTC().Format(http.TimeFormat)}
	lastDate.Store(d)
	return d.text
}

type dateText struct {
	sec  int64
	text string
}

var lastDate atomic.Pointer[dateText]
