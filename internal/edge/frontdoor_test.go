package edge

import (
	"net"
	"net/http"
	"testing"

	"github.com/qodaperio/autoscale/internal/h1"
)

// frontDoor serves a handler on loopback as autoscaled serve serves the
// edge: by h1. It has the parts of httptest.Server these tests use.
type frontDoor struct {
	URL      string
	Listener net.Listener
	srv      *h1.Server
}

func serveH1(tb testing.TB, h http.Handler) *frontDoor {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f := &frontDoor{URL: "http://" + ln.Addr().String(), Listener: ln, srv: &h1.Server{Handler: h}}
	go f.srv.Serve(ln)
	return f
}

func (f *frontDoor) Close() { f.srv.Close() }
