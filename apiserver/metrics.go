package apiserver

import (
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/qodaperio/autoscale/internal/qodengine"
)

// metrics are the server's Prometheus metrics, on a registry of its own (so
// that several servers in one test process do not collide).
type metrics struct {
	registry   *prometheus.Registry
	actions    *prometheus.CounterVec
	failures   *prometheus.CounterVec
	sweepTime  prometheus.Histogram
	sweepPools prometheus.Gauge
	statements prometheus.Counter
	hookCalls  *prometheus.CounterVec
	holdTime   *prometheus.HistogramVec
	handler    http.Handler
}

func (m *metrics) hookCall(host, reason string, ok bool) {
	outcome := "accepted"
	if !ok {
		outcome = "failed"
	}
	m.hookCalls.WithLabelValues(host, reason, outcome).Inc()
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qod_autoscale_actions_total", Help: "Scale actions the sweep took, by direction.",
		}, []string{"direction"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qod_autoscale_failures_total", Help: "Scale actions the sweep attempted that failed, by direction.",
		}, []string{"direction"}),
		sweepTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "qod_autoscale_sweep_duration_seconds", Help: "Wall time of one sweep: flush, read, decide and act.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		sweepPools: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qod_autoscale_swept_pools", Help: "Banded pools the last sweep decided on.",
		}),
		statements: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qod_load_statements_total", Help: "Statements recorded through POST /api/pool/load.",
		}),
		hookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aperio_scaling_calls_total", Help: "Scaling hook calls, by hostname, reason and outcome.",
		}, []string{"hostname", "reason", "outcome"}),
		// Only hostnames with an armed hook hold requests, so the label
		// set is bounded by the records.
		holdTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "aperio_edge_hold_seconds", Help: "How long requests were held for a hostname with no routable client (cold start), by hostname.",
			Buckets: []float64{.01, .05, .1, .5, 1, 2.5, 5, 10, 20, 30, 45, 60, 120},
		}, []string{"hostname"}),
	}
	for _, d := range []qodengine.Direction{qodengine.Out, qodengine.In} {
		m.actions.WithLabelValues(d.String())
		m.failures.WithLabelValues(d.String())
	}
	leader := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "qod_autoscale_leader", Help: "1 while this replica makes the sweep's decisions (always, for a single replica).",
	}, func() float64 {
		if s.leading.Load() {
			return 1
		}
		return 0
	})
	m.registry.MustRegister(m.actions, m.failures, m.sweepTime, m.sweepPools, m.statements, leader, m.hookCalls, m.holdTime, &hookCollector{s: s},
		&poolCollector{s: s}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return m
}

func (m *metrics) sweepDone(r SweepReport) {
	m.sweepTime.Observe(r.Duration.Seconds())
	m.sweepPools.Set(float64(r.Pools))
}

func (m *metrics) action(d qodengine.Direction)  { m.actions.WithLabelValues(d.String()).Inc() }
func (m *metrics) failure(d qodengine.Direction) { m.failures.WithLabelValues(d.String()).Inc() }

// poolCollector reports the per-pool gauges from the last sweep at scrape
// time, so a sweep over many pools sets no gauge.
type poolCollector struct{ s *Server }

var (
	descUtil = prometheus.NewDesc("qod_pool_utilization", "Demand over capacity at the last sweep (absent while capacity is unknown).", []string{"tenant", "pool"}, nil)
	descDem  = prometheus.NewDesc("qod_pool_demand", "Average statements in flight over the window at the last sweep.", []string{"tenant", "pool"}, nil)
	descCap  = prometheus.NewDesc("qod_pool_capacity", "Statements the routable read-capable nodes take at once, at the last sweep.", []string{"tenant", "pool"}, nil)
	descSize = prometheus.NewDesc("qod_pool_size", "Nodes in the pool after the last sweep.", []string{"tenant", "pool"}, nil)
)

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descUtil
	ch <- descDem
	ch <- descCap
	ch <- descSize
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.s.sweeper.result()
	for i := range r.pools {
		sw := &r.pools[i]
		k := r.view[i].Key
		id := k.String()
		d := sw.Decision
		if !math.IsNaN(d.Utilization) {
			ch <- prometheus.MustNewConstMetric(descUtil, prometheus.GaugeValue, d.Utilization, k.Tenant, id)
		}
		ch <- prometheus.MustNewConstMetric(descDem, prometheus.GaugeValue, d.Demand, k.Tenant, id)
		ch <- prometheus.MustNewConstMetric(descCap, prometheus.GaugeValue, max(d.Capacity, 0), k.Tenant, id)
		ch <- prometheus.MustNewConstMetric(descSize, prometheus.GaugeValue, float64(sw.Size), k.Tenant, id)
	}
}

// hookCollector reports each hook's last sample at scrape time, so a loop
// tick sets no gauge.
type hookCollector struct{ s *Server }

var (
	descHookUtil  = prometheus.NewDesc("aperio_scaling_utilization", "In-flight requests over announced capacity at the last sample (absent while unknown).", []string{"hostname"}, nil)
	descHookArmed = prometheus.NewDesc("aperio_scaling_armed", "1 while the hostname's hook may be called, 0 once disarmed.", []string{"hostname"}, nil)
)

func (c *hookCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descHookUtil
	ch <- descHookArmed
}

func (c *hookCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.hooks.mu.Lock()
	defer c.s.hooks.mu.Unlock()
	for _, lr := range c.s.hooks.records {
		if lr.util >= 0 {
			ch <- prometheus.MustNewConstMetric(descHookUtil, prometheus.GaugeValue, lr.util, lr.rec.Hostname)
		}
		armed := 0.0
		if lr.state.Armed {
			armed = 1
		}
		ch <- prometheus.MustNewConstMetric(descHookArmed, prometheus.GaugeValue, armed, lr.rec.Hostname)
	}
}
