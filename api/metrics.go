package api

import (
	"context"
	goruntime "runtime"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agent-control-plane/agent-control-plane/supervisor"
)

const ns = "agent_control_plane"

// newBuildInfo is agent_control_plane_build_info: 1, labelled with the
// daemon's version and the Go it was built with, as Prometheus exporters
// do, so that dashboards can join on it.
func newBuildInfo(version string) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info",
		Help:        "The daemon's version and Go version; always 1.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": goruntime.Version()},
	})
	g.Set(1)
	return g
}

// collector reads the supervisor's state at scrape time, so no gauge goes
// stale. Every label value comes from a closed set.
type collector struct {
	sup        Supervisor
	sandboxes  *prometheus.Desc
	creates    *prometheus.Desc
	stops      *prometheus.Desc
	rehydrates *prometheus.Desc
	events     *prometheus.Desc
	portsInUse *prometheus.Desc
	portsTotal *prometheus.Desc
	subs       *prometheus.Desc
	cpu        *prometheus.Desc
	memory     *prometheus.Desc
	pids       *prometheus.Desc
	ready      *prometheus.Desc
	steps      *prometheus.Desc
}

func newCollector(sup Supervisor) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(ns+"_"+name, help, labels, nil)
	}
	return &collector{
		sup:        sup,
		sandboxes:  d("sandboxes", "Sandboxes by state and runtime.", "state", "runtime"),
		creates:    d("sandbox_creates_total", "Sandbox creates by result.", "result"),
		stops:      d("sandbox_stops_total", "Sandbox stops by reason.", "reason"),
		rehydrates: d("rehydrations_total", "Records loaded at daemon start by result.", "result"),
		events:     d("events_published_total", "Events published on the feed by type.", "type"),
		portsInUse: d("port_leases", "Sandbox ports leased now."),
		portsTotal: d("port_range_size", "Ports in the sandbox port range."),
		subs:       d("event_subscribers", "Open event-stream subscriptions."),
		cpu:        d("sandbox_cpu_seconds", "CPU time consumed so far by the live sandboxes of a runtime (those it can meter).", "runtime"),
		memory:     d("sandbox_memory_bytes", "Memory the live sandboxes of a runtime use now.", "runtime"),
		pids:       d("sandbox_pids", "Tasks in the live sandboxes of a runtime now.", "runtime"),
		ready:      d("sandbox_ready_seconds", "Time from a workload's start to its ready path answering, by runtime.", "runtime"),
		steps:      d("sandbox_create_step_seconds_total", "Time the creates that succeeded spent in each step (divide by sandbox_creates_total{result=\"ok\"} for a mean).", "step"),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.sandboxes, c.creates, c.stops, c.rehydrates, c.events, c.portsInUse, c.portsTotal, c.subs, c.cpu, c.memory, c.pids, c.ready, c.steps} {
		ch <- d
	}
}

var eventTypes = []string{supervisor.EventCreated, supervisor.EventStarting, supervisor.EventStarted, supervisor.EventStopped, supervisor.EventDeleted}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.sup.Stats()
	for runtime, states := range st.Sandboxes {
		for _, state := range []supervisor.State{supervisor.Starting, supervisor.Started, supervisor.Stopped} {
			ch <- prometheus.MustNewConstMetric(c.sandboxes, prometheus.GaugeValue, float64(states[state]), string(state), runtime)
		}
	}
	for _, r := range supervisor.CreateResults {
		ch <- prometheus.MustNewConstMetric(c.creates, prometheus.CounterValue, float64(st.Creates[r]), r)
	}
	for _, r := range supervisor.StopReasons {
		ch <- prometheus.MustNewConstMetric(c.stops, prometheus.CounterValue, float64(st.Stops[r]), string(r))
	}
	for _, r := range supervisor.RehydrateResults {
		ch <- prometheus.MustNewConstMetric(c.rehydrates, prometheus.CounterValue, float64(st.Rehydrates[r]), r)
	}
	for _, t := range eventTypes {
		ch <- prometheus.MustNewConstMetric(c.events, prometheus.CounterValue, float64(st.Events[t]), t)
	}
	for _, step := range supervisor.CreateSteps {
		ch <- prometheus.MustNewConstMetric(c.steps, prometheus.CounterValue, st.CreateSteps[step], step)
	}
	ch <- prometheus.MustNewConstMetric(c.portsInUse, prometheus.GaugeValue, float64(st.PortsInUse))
	ch <- prometheus.MustNewConstMetric(c.portsTotal, prometheus.GaugeValue, float64(st.PortsTotal))
	ch <- prometheus.MustNewConstMetric(c.subs, prometheus.GaugeValue, float64(st.Subscribers))
	for runtime, h := range st.Ready {
		cumulative, n := map[float64]uint64{}, uint64(0)
		for i, bound := range supervisor.ReadyBuckets {
			n += h.Buckets[i]
			cumulative[bound] = n
		}
		ch <- prometheus.MustNewConstHistogram(c.ready, h.Count, h.Sum, cumulative, runtime)
	}
	ctx, cancel := context.WithTimeout(context.Background(), supervisor.UsageTimeout)
	defer cancel()
	for runtime, u := range c.sup.UsageByRuntime(ctx) {
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.GaugeValue, u.CPUSeconds, runtime)
		ch <- prometheus.MustNewConstMetric(c.memory, prometheus.GaugeValue, float64(u.MemoryBytes), runtime)
		ch <- prometheus.MustNewConstMetric(c.pids, prometheus.GaugeValue, float64(u.Pids), runtime)
	}
}
