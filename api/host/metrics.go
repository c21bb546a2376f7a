package host

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const ns = "agent_control_plane"

// httpMetrics counts requests by route pattern (a closed set: the route
// table) and status code.
type httpMetrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: "http_requests_total",
			Help: "HTTP requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern; event streams are left out (their life is no latency).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *httpMetrics) observe(route string, code int, d time.Duration, stream bool) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	if !stream {
		m.latency.WithLabelValues(route).Observe(d.Seconds())
	}
}
