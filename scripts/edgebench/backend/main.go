// Command backend is the tiny HTTP server the edge benchmark proxies to:
// every request gets a 13-byte 200 answer, the same for nginx and the edge.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18080", "address to serve on")
	flag.Parse()
	body := []byte("hello, edge!\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
