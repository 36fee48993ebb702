package daemon

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/onehost/onehost/internal/cluster"
	"github.com/onehost/onehost/internal/procstat"
	"github.com/onehost/onehost/internal/registry"
)

// metrics exposes the cluster to Prometheus, read at each scrape from the supervisor's
// status and from /proc (internal/procstat), so nothing runs between scrapes. Names follow
// Prometheus's conventions (unit suffixes, _total for counters); docs/supervisor.md maps
// PM2 exporters' names (pm2_up, pm2_cpu, pm2_memory, pm2_restarts) onto them.
type metrics struct {
	reg *registry.Registry
	log *zap.Logger

	up, restarts, cpu, rss, requests, conns, healthy, role *prometheus.Desc
	reloads, reloadsAborted, scales, steering              *prometheus.Desc
	hostCPU, netRx, netTx                                  *prometheus.Desc
}

// Every series of a worker or a cluster carries its app's name in "app" ("" for a
// configuration without names, which Prometheus reads as no label).
func newMetrics(reg *registry.Registry, log *zap.Logger) *metrics {
	w := []string{"app", "slot"}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("onehost_"+name, help, labels, nil)
	}
	return &metrics{reg: reg, log: log,
		up:             d("worker_up", "1 when the slot's worker is online, 0 otherwise (pm2_up).", w...),
		restarts:       d("worker_restarts_total", "Restarts of the slot's worker: crashes, reloads, memory restarts (pm2_restarts).", w...),
		cpu:            d("worker_cpu_seconds_total", "User and system CPU time of the slot's current worker process (pm2_cpu is a percentage: rate() of this).", w...),
		rss:            d("worker_resident_memory_bytes", "Resident memory of the slot's worker (pm2_memory).", w...),
		requests:       d("worker_requests_total", "Requests the slot's current worker has answered, as it reports them.", w...),
		conns:          d("worker_open_connections", "Connections the slot's worker holds open, as it reports them.", w...),
		healthy:        d("worker_healthy", "1 when the worker reports its dependencies healthy, 0 unhealthy; absent when it reports nothing.", w...),
		role:           d("worker_role_info", "1, its role label the worker's own word for its part in its app (the feed worker's owner or follower); absent when it reports none.", "app", "slot", "role"),
		reloads:        d("reloads_total", "Rolling reloads begun.", "app"),
		reloadsAborted: d("reloads_aborted_total", "Rolling reloads aborted (the previous workers kept serving).", "app"),
		scales:         d("scale_events_total", "Scale operations.", "app"),
		steering:       d("steering_info", "How new connections reach the workers: bpf-rr or hash (cluster-mode apps).", "app", "steering"),
		hostCPU:        d("host_cpu_seconds_total", "The host's CPU time by CPU and mode, from /proc/stat.", "cpu", "mode"),
		netRx:          d("host_network_receive_bytes_total", "Bytes received through every network interface, loopback included."),
		netTx:          d("host_network_transmit_bytes_total", "Bytes transmitted through every network interface, loopback included."),
	}
}

// Describe sends every description (not by collecting: registering must not ask the
// supervisor for anything).
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.up, m.restarts, m.cpu, m.rss, m.requests, m.conns, m.healthy, m.role,
		m.reloads, m.reloadsAborted, m.scales, m.steering, m.hostCPU, m.netRx, m.netTx} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	for _, a := range m.reg.Clusters() {
		sup := a.Sup
		if sup == nil { // stopped: no series, as for a worker that is gone
			continue
		}
		for _, w := range sup.Status() {
			slot := strconv.Itoa(w.ID)
			up := 0.0
			if w.Status == cluster.StateOnline {
				up = 1
			}
			ch <- prometheus.MustNewConstMetric(m.up, gauge, up, a.Name, slot)
			ch <- prometheus.MustNewConstMetric(m.restarts, counter, float64(w.Restarts), a.Name, slot)
			ch <- prometheus.MustNewConstMetric(m.cpu, counter, w.CPUSeconds, a.Name, slot)
			ch <- prometheus.MustNewConstMetric(m.rss, gauge, float64(w.RSSBytes), a.Name, slot)
			if !w.NoCounters { // a program without our ipc: no series rather than a false 0
				ch <- prometheus.MustNewConstMetric(m.requests, counter, float64(w.Requests), a.Name, slot)
				ch <- prometheus.MustNewConstMetric(m.conns, gauge, float64(w.Connections), a.Name, slot)
			}
			if w.Health != "" {
				ch <- prometheus.MustNewConstMetric(m.healthy, gauge, b2f(w.Health == cluster.HealthOK), a.Name, slot)
			}
			if w.Role != "" {
				ch <- prometheus.MustNewConstMetric(m.role, gauge, 1, a.Name, slot, w.Role)
			}
		}
		c := sup.Counters()
		ch <- prometheus.MustNewConstMetric(m.reloads, counter, float64(c.Reloads), a.Name)
		ch <- prometheus.MustNewConstMetric(m.reloadsAborted, counter, float64(c.ReloadsAborted), a.Name)
		ch <- prometheus.MustNewConstMetric(m.scales, counter, float64(c.Scales), a.Name)
		if !a.Config.Fork() {
			ch <- prometheus.MustNewConstMetric(m.steering, gauge, 1, a.Name, sup.Steering())
		}
	}
	h, err := procstat.ReadHost("")
	if err != nil {
		m.log.Warn("metrics: host counters", zap.Error(err))
		return
	}
	for _, t := range h.CPUs {
		cpu := strconv.Itoa(t.CPU)
		for mode, v := range map[string]float64{"user": t.User, "nice": t.Nice, "system": t.System, "idle": t.Idle,
			"iowait": t.IOWait, "irq": t.IRQ, "softirq": t.SoftIRQ, "steal": t.Steal} {
			ch <- prometheus.MustNewConstMetric(m.hostCPU, counter, v, cpu, mode)
		}
	}
	ch <- prometheus.MustNewConstMetric(m.netRx, counter, float64(h.NetRxBytes))
	ch <- prometheus.MustNewConstMetric(m.netTx, counter, float64(h.NetTxBytes))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// metricsRegistry is the supervisor's own registry: the cluster's metrics and the
// supervisor process's (Go runtime, process CPU and memory).
func metricsRegistry(reg *registry.Registry, log *zap.Logger) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(newMetrics(reg, log), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}
