// Package pgflowprom exports pgflow metrics to Prometheus.
//
// A Collector is both a pgflow.Hooks (set it as WorkerConfig.Hooks) and a prometheus.Collector (register it on
// a registry): it counts the worker's polls, claimed tasks, handler runs and task outcomes, labelled by flow,
// step, queue and outcome. A DatabaseCollector reads the state of the database at scrape time (runs by status,
// queue depth, live workers); the dashboard's --metrics-listen serves it. Handler serves a registry in the
// Prometheus exposition format.
//
//	metrics := pgflowprom.New(pgflowprom.Options{})
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(metrics)
//	http.Handle("/metrics", pgflowprom.Handler(reg))
//	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}, Hooks: metrics})
//
// The package lives apart from pgflow so that programs that do not use Prometheus do not depend on it.
package pgflowprom

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pgflow-go/pgflow"
)

// DefaultBuckets are the histogram buckets (seconds) of handler, task and poll durations: 1 ms to 5 min.
var DefaultBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// Options configures a Collector. The zero value is ready to use.
type Options struct {
	// Namespace prefixes every metric name. Default "pgflow".
	Namespace string
	// ConstLabels are added to every metric, e.g. {"service": "billing"}.
	ConstLabels prometheus.Labels
	// Buckets are the upper bounds (seconds) of the duration histograms. Default DefaultBuckets.
	Buckets []float64
}

// Collector turns a worker's hook events into Prometheus metrics. It implements pgflow.Hooks and
// prometheus.Collector; one Collector may serve any number of workers. Create it with New.
//
// Metrics (with the default namespace):
//
//	pgflow_polls_total{flow,queue,outcome}                 polls of the queue (outcome: claimed, empty, unclaimed, error)
//	pgflow_poll_duration_seconds{flow,queue,outcome}       read + claim round trip, including the wait on an empty queue
//	pgflow_messages_read_total{flow,queue}                 messages read from the queue
//	pgflow_tasks_claimed_total{flow,step,queue}            tasks claimed with pgflow.start_tasks
//	pgflow_tasks_in_flight{flow,step,queue}                tasks started and not yet finished
//	pgflow_handler_duration_seconds{flow,step,queue,outcome} handler run time (outcome: ok, error, panic)
//	pgflow_tasks_finished_total{flow,step,queue,outcome}   finished tasks (outcome: completed, retried, failed,
//	                                                       not_recorded, stale, released, cancelled,
//	                                                       unreported)
//	pgflow_task_duration_seconds{flow,step,queue,outcome}  handler + reporting its result
//	pgflow_stale_results_total{flow,step,queue,reason}     results not recorded because their attempt was no longer
//	                                                       current (reason: superseded, timed_out)
type Collector struct {
	polls       *prometheus.CounterVec
	pollSeconds *prometheus.HistogramVec
	messages    *prometheus.CounterVec
	claimed     *prometheus.CounterVec
	inFlight    *prometheus.GaugeVec
	handler     *prometheus.HistogramVec
	finished    *prometheus.CounterVec
	taskSeconds *prometheus.HistogramVec
	stale       *prometheus.CounterVec
}

var _ pgflow.Hooks = (*Collector)(nil)
var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector; register it with a prometheus.Registerer and set it as WorkerConfig.Hooks.
func New(opts Options) *Collector {
	ns := opts.Namespace
	if ns == "" {
		ns = "pgflow"
	}
	buckets := opts.Buckets
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Name: name, Help: help, ConstLabels: opts.ConstLabels,
		}, labels)
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Name: name, Help: help, ConstLabels: opts.ConstLabels, Buckets: buckets,
		}, labels)
	}
	return &Collector{
		polls: counter("polls_total",
			"Polls of the flow's queue (read and claim), by outcome: claimed, empty, unclaimed or error.",
			"flow", "queue", "outcome"),
		pollSeconds: histogram("poll_duration_seconds",
			"Round trip of one poll (pgmq.read_with_poll + pgflow.start_tasks), including the wait on an empty queue.",
			"flow", "queue", "outcome"),
		messages: counter("messages_read_total", "Messages read from the flow's queue.", "flow", "queue"),
		claimed: counter("tasks_claimed_total", "Tasks claimed with pgflow.start_tasks.",
			"flow", "step", "queue"),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: ns, Name: "tasks_in_flight", Help: "Tasks started by workers and not finished yet.",
			ConstLabels: opts.ConstLabels,
		}, []string{"flow", "step", "queue"}),
		handler: histogram("handler_duration_seconds",
			"Run time of step handlers, by outcome: ok, error or panic.",
			"flow", "step", "queue", "outcome"),
		finished: counter("tasks_finished_total",
			"Finished tasks by outcome: completed, retried, failed, not_recorded, stale, released, cancelled or unreported.",
			"flow", "step", "queue", "outcome"),
		taskSeconds: histogram("task_duration_seconds",
			"Time from a task's start to its result being recorded: the handler plus reporting.",
			"flow", "step", "queue", "outcome"),
		stale: counter("stale_results_total",
			"Handler results not recorded because their attempt was no longer the task's current one, by reason: "+
				"superseded (the task was recovered and claimed again) or timed_out (the handler returned after its step timeout).",
			"flow", "step", "queue", "reason"),
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.polls, c.pollSeconds, c.messages, c.claimed, c.inFlight, c.handler, c.finished, c.taskSeconds, c.stale}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// PollDone implements pgflow.Hooks.
func (c *Collector) PollDone(_ context.Context, e pgflow.PollEvent) {
	outcome := string(e.Outcome())
	c.polls.WithLabelValues(e.FlowSlug, e.QueueName, outcome).Inc()
	c.pollSeconds.WithLabelValues(e.FlowSlug, e.QueueName, outcome).Observe(e.Duration.Seconds())
	if e.Messages > 0 {
		c.messages.WithLabelValues(e.FlowSlug, e.QueueName).Add(float64(e.Messages))
	}
}

// TaskClaimed implements pgflow.Hooks.
func (c *Collector) TaskClaimed(_ context.Context, e pgflow.TaskEvent) {
	c.claimed.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName).Inc()
}

// TaskStarted implements pgflow.Hooks; it returns ctx.
func (c *Collector) TaskStarted(ctx context.Context, e pgflow.TaskEvent) context.Context {
	c.inFlight.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName).Inc()
	return ctx
}

// HandlerDone implements pgflow.Hooks.
func (c *Collector) HandlerDone(_ context.Context, e pgflow.HandlerEvent) {
	c.handler.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName, string(e.Outcome())).Observe(e.Duration.Seconds())
}

// TaskFinished implements pgflow.Hooks.
func (c *Collector) TaskFinished(_ context.Context, e pgflow.TaskFinishedEvent) {
	outcome := string(e.Outcome)
	c.inFlight.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName).Dec()
	c.finished.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName, outcome).Inc()
	c.taskSeconds.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName, outcome).Observe(e.Duration.Seconds())
}

// StaleResult implements pgflow.Hooks.
func (c *Collector) StaleResult(_ context.Context, e pgflow.StaleResultEvent) {
	c.stale.WithLabelValues(e.FlowSlug, e.StepSlug, e.QueueName, string(e.Reason)).Inc()
}

// Handler serves the metrics of g in the Prometheus exposition format (mount it at /metrics). Errors while
// gathering are answered with HTTP 500 naming the failing collector.
func Handler(g prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError})
}
