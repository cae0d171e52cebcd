// Command prof runs the bare edge proxy (no API server, served by h1) in front of one
// client at 127.0.0.1:18080 on 127.0.0.1:18082, for profiling it under wrk:
// PROF=/tmp/cpu.prof writes a CPU profile of eight seconds and an allocation
// profile beside it, then exits.
package main

import (
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/qodaperio/autoscale/internal/edge"
	"github.com/qodaperio/autoscale/internal/h1"
)

type noHooks struct{}

func (noHooks) Hook(string) edge.HookInfo { return edge.HookInfo{} }

func main() {
	pools := edge.NewPools(time.Hour, 1000)
	u, _ := url.Parse("http://127.0.0.1:18080")
	pools.Heartbeat("bench.local", "c1", edge.ClientInfo{Target: u, State: edge.Active, ProbeOK: true}, edge.HostSettings{}, time.Now())
	p := edge.NewProxy(edge.Options{Pools: pools, Hooks: noHooks{}})
	if os.Getenv("PROF") != "" {
		runtime.SetMutexProfileFraction(5)
		runtime.SetBlockProfileRate(10000)
		f, _ := os.Create(os.Getenv("PROF"))
		pprof.StartCPUProfile(f)
		go func() {
			time.Sleep(8 * time.Second)
			pprof.StopCPUProfile()
			f.Close()
			m, _ := os.Create(os.Getenv("PROF") + ".mem")
			pprof.Lookup("allocs").WriteTo(m, 0)
			mu, _ := os.Create(os.Getenv("PROF") + ".mutex")
			pprof.Lookup("mutex").WriteTo(mu, 0)
			mu.Close()
			m.Close()
			os.Exit(0)
		}()
	}
	// NETHTTP=1 serves through net/http's server instead, for comparison.
	if os.Getenv("NETHTTP") != "" {
		http.ListenAndServe("127.0.0.1:18082", p)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:18082")
	if err != nil {
		panic(err)
	}
	(&h1.Server{Handler: p}).Serve(ln)
}
