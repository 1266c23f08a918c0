package pgflowprom

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pgflow-go/pgflow"
)

// workerWindow: workers whose last heartbeat is older are left out of pgflow_workers (long gone, not stopped
// cleanly).
const workerWindow = time.Hour

// DatabaseOptions configures a DatabaseCollector. The zero value is ready to use.
type DatabaseOptions struct {
	// Namespace prefixes every metric name. Default "pgflow".
	Namespace string
	// ConstLabels are added to every metric.
	ConstLabels prometheus.Labels
	// Timeout bounds the queries of one scrape. Default 10 s.
	Timeout time.Duration
	// StaleAfter: a running worker whose last heartbeat is older counts as unresponsive. Default 30 s.
	StaleAfter time.Duration
	// Logger receives query errors. Default: slog.Default().
	Logger *slog.Logger
}

// DatabaseCollector reports the state of a pgflow database at scrape time, with plain selects (a read-only
// role suffices):
//
//	pgflow_runs{flow,status}                         runs by status (started, completed, failed, cancelled)
//	pgflow_queue_messages{queue}                     messages in each PGMQ queue, visible or not (pgmq.metrics)
//	pgflow_queue_visible_messages{queue}             messages a reader could take now
//	pgflow_queue_oldest_message_age_seconds{queue}   age of the oldest message (0 when empty)
//	pgflow_queue_messages_sent_total{queue}          messages ever sent to the queue
//	pgflow_workers{queue,state}                      workers not stopped with a heartbeat in the last hour, by
//	                                                 state: alive, unresponsive (no heartbeat for StaleAfter)
//	                                                 or deprecated (finishing their tasks before stopping)
//	pgflow_database_scrape_success                   1 when every query of the scrape succeeded, else 0
//
// Counting runs scans pgflow.runs; on very large tables scrape less often or prune old runs.
type DatabaseCollector struct {
	client     *pgflow.Client
	timeout    time.Duration
	staleAfter time.Duration
	log        *slog.Logger

	runs, queueLen, queueVisible, queueAge, queueSent, workers, success *prometheus.Desc
}

var _ prometheus.Collector = (*DatabaseCollector)(nil)

// NewDatabaseCollector returns a collector that reads the database of client at each scrape (a few short selects:
// Client.ListFlows, ListQueues and ListWorkers).
func NewDatabaseCollector(client *pgflow.Client, opts DatabaseOptions) *DatabaseCollector {
	ns := opts.Namespace
	if ns == "" {
		ns = "pgflow"
	}
	c := &DatabaseCollector{client: client, timeout: opts.Timeout, staleAfter: opts.StaleAfter, log: opts.Logger}
	if c.timeout <= 0 {
		c.timeout = 10 * time.Second
	}
	if c.staleAfter <= 0 {
		c.staleAfter = 30 * time.Second
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "", name), help, labels, opts.ConstLabels)
	}
	c.runs = desc("runs", "Runs by flow and status (started, completed, failed, cancelled).", "flow", "status")
	c.queueLen = desc("queue_messages", "Messages in the PGMQ queue, visible or not.", "queue")
	c.queueVisible = desc("queue_visible_messages", "Messages in the PGMQ queue that a reader could take now.", "queue")
	c.queueAge = desc("queue_oldest_message_age_seconds", "Age of the oldest message in the PGMQ queue (0 when empty).", "queue")
	c.queueSent = desc("queue_messages_sent_total", "Messages ever sent to the PGMQ queue.", "queue")
	c.workers = desc("workers", "Workers not stopped with a heartbeat in the last hour, by queue and state (alive, unresponsive, deprecated).", "queue", "state")
	c.success = desc("database_scrape_success", "1 when every query of the last scrape succeeded, else 0.")
	return c
}

// Describe implements prometheus.Collector.
func (c *DatabaseCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.runs, c.queueLen, c.queueVisible, c.queueAge, c.queueSent, c.workers, c.success} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. A failing query is logged and its metrics are left out;
// pgflow_database_scrape_success then reports 0.
func (c *DatabaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ok := true

	if flows, err := c.client.ListFlows(ctx); err != nil {
		ok = false
		c.log.Error("pgflow metrics: reading runs by status failed", "error", err)
	} else {
		for _, f := range flows {
			ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(f.Runs.Started), f.Slug, "started")
			ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(f.Runs.Completed), f.Slug, "completed")
			ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(f.Runs.Failed), f.Slug, "failed")
			ch <- prometheus.MustNewConstMetric(c.runs, prometheus.GaugeValue, float64(f.Runs.Cancelled), f.Slug, "cancelled")
		}
	}

	if queues, err := c.client.ListQueues(ctx); err != nil {
		ok = false
		c.log.Error("pgflow metrics: reading queue metrics failed", "error", err)
	} else {
		for _, q := range queues {
			if q.Err != nil {
				ok = false
				c.log.Error("pgflow metrics: reading one queue's metrics failed", "queue", q.Name, "error", q.Err)
				continue
			}
			ch <- prometheus.MustNewConstMetric(c.queueLen, prometheus.GaugeValue, float64(q.Length), q.Name)
			ch <- prometheus.MustNewConstMetric(c.queueVisible, prometheus.GaugeValue, float64(q.Visible), q.Name)
			ch <- prometheus.MustNewConstMetric(c.queueAge, prometheus.GaugeValue, q.OldestMessageAge.Seconds(), q.Name)
			ch <- prometheus.MustNewConstMetric(c.queueSent, prometheus.CounterValue, float64(q.Sent), q.Name)
		}
	}

	if ws, err := c.client.ListWorkers(ctx, workerWindow); err != nil {
		ok = false
		c.log.Error("pgflow metrics: reading workers failed", "error", err)
	} else {
		type key struct{ queue, state string }
		counts := map[key]int{}
		for _, w := range ws {
			if w.StoppedAt != nil {
				continue
			}
			state := "alive"
			switch {
			case w.DeprecatedAt != nil:
				state = "deprecated"
			case w.HeartbeatAge > c.staleAfter:
				state = "unresponsive"
			}
			counts[key{w.Queue, state}]++
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(n), k.queue, k.state)
		}
	}

	success := 0.0
	if ok {
		success = 1
	}
	ch <- prometheus.MustNewConstMetric(c.success, prometheus.GaugeValue, success)
}
