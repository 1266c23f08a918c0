package pgflow

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// WorkerConfig configures a Worker. Flows is required; the zero value of every other field means its documented
// default, and negative values are rejected (except MaintenanceInterval, where a negative value disables
// maintenance). NewWorker validates the configuration and names any bad field and value in its error.
type WorkerConfig struct {
	// Flows are the flows the worker serves (at least one; each slug once). All of them share MaxConcurrent
	// handler slots, one LISTEN connection (the Client's), one heartbeat timer and one maintenance loop; each has
	// its own worker row in pgflow.workers (its queue's).
	Flows []WorkerFlow
	// MaxConcurrent is the number of handlers that may run at once. Default 10.
	MaxConcurrent int
	// BatchSize is the largest number of messages read per poll; a poll never reads more messages than there are
	// free handler slots. Default 10.
	BatchSize int
	// VisibilityTimeout hides a message read by this worker from other readers until the worker has claimed its
	// task (pgflow.start_tasks then hides it for the step's timeout + 2 s). Whole seconds, rounded up. Default 5 s.
	VisibilityTimeout time.Duration
	// MaxPollWait is the longest one poll waits for a message when the queue is empty
	// (pgmq.read_with_poll max_poll_seconds). Whole seconds, rounded up. Default 5 s.
	MaxPollWait time.Duration
	// PollInterval is how often a waiting poll looks at the queue again (pgmq.read_with_poll poll_interval_ms).
	// Whole milliseconds, rounded up. Default 100 ms.
	PollInterval time.Duration
	// HeartbeatInterval is how often the worker records that it is alive (pgflow.heartbeat_worker) and whether it
	// listens on its own channel (a change of that is recorded at once), and learns whether it was deprecated.
	// Heartbeats run on their own timer, independent of handlers. Default 5 s.
	HeartbeatInterval time.Duration
	// ShutdownTimeout is how long in-flight handlers may keep running after shutdown began; then their context is
	// cancelled. Default 30 s.
	ShutdownTimeout time.Duration
	// MaintenanceInterval is how often the worker runs pgflow.requeue_stalled_tasks (at most one worker of a
	// database at a time, under an advisory lock). Default 15 s; negative disables maintenance in this worker.
	MaintenanceInterval time.Duration
	// AllowDataLoss lets the worker recompile a flow whose stored definition differs from the code even in
	// production, which deletes the flow's runs, tasks and queue. Without it a difference stops the worker with
	// a *ShapeMismatchError, unless the database is local (pgflow.is_local()).
	AllowDataLoss bool
	// WorkerID identifies the worker in pgflow.workers and in logs; it must be a UUID. Default: a random UUID.
	WorkerID string
	// PollOnly turns off waking on queue notifications. By default the worker listens on one extra connection
	// for pgflow:queue:<queue> notifications (sent by the schema since v0.18.0 when steps start) and, per worker
	// row, for pgflow:w:<worker_id> (since v0.20.0 the schema wakes one alive worker of a queue there instead of
	// all of them, among the workers whose heartbeat says that LISTEN is in effect on a direct connection; a worker
	// that cannot take everything passes the wake on to the queue channel), and reads its
	// queue and claims the tasks in one call (pgflow.read_and_start_tasks) as soon as new messages are
	// announced; with nothing announced it reads every 2 s (or every MaxPollWait, if shorter), which finds messages that become visible without a notification (delayed
	// starts, retries after their backoff, tasks of crashed workers). With PollOnly, while the listener is
	// disconnected, or on a schema older than v0.18.0, the worker instead waits inside pgmq.read_with_poll, which
	// reads the queue every PollInterval in the database. Set it when the worker's connections go through a
	// pooler in transaction mode (notifications are not delivered there; without PollOnly such a worker still
	// works, reading every 2 s) or when the extra connection is not affordable. See docs/performance.md.
	PollOnly bool
	// Logger receives the worker's logs: one line when it starts and stops, warnings and errors as they happen,
	// per-task detail at debug level. Default: slog.Default().
	Logger *slog.Logger
	// Hooks observes polls, claimed tasks, handler runs and task outcomes, e.g. for metrics and traces
	// (packages pgflowprom and pgflowotel); MultiHooks combines several. Default: none.
	Hooks Hooks
	// Schedules are cron schedules (NewSchedule) the worker writes to pgflow.schedules at startup, after compiling
	// its flows: new ones are created, changed ones updated (a changed timetable starts at the worker's start, so
	// no burst of old ticks fires), paused ones stay paused. A schedule's flow must exist in the database (serve it
	// in Flows or compile it elsewhere). Every worker - with or without Schedules - fires the due ticks of every
	// schedule of the database, one worker at a time under an advisory lock; see docs/schedules.md.
	Schedules []*Schedule
}

// WorkerFlow is one flow a Worker serves, or with QueuePerStep chosen steps of it.
type WorkerFlow struct {
	// Flow is the flow; create it with NewFlow.
	Flow AnyFlow
	// Steps, for a flow defined with QueuePerStep, are the steps this entry serves: the worker reads only their
	// queues, so it never claims a task of another step. Empty: every step. A flow may be listed several times
	// with disjoint Steps, each entry with its own MaxConcurrent and BatchSize; other steps can be served by
	// other processes. A flow with one queue cannot be split (set QueuePerStep on it first).
	Steps []string
	// MaxConcurrent, when positive and smaller than WorkerConfig.MaxConcurrent, is this entry's share of the
	// worker's handler slots: at most this many of its tasks run at once. 0: no limit of its own.
	MaxConcurrent int
	// BatchSize, when positive, replaces WorkerConfig.BatchSize for this entry's queues. 0: the worker's.
	BatchSize int
}

// Defaults of WorkerConfig.
const (
	DefaultMaxConcurrent       = 10
	DefaultBatchSize           = 10
	DefaultVisibilityTimeout   = 5 * time.Second
	DefaultMaxPollWait         = 5 * time.Second
	DefaultPollInterval        = 100 * time.Millisecond
	DefaultHeartbeatInterval   = 5 * time.Second
	DefaultShutdownTimeout     = 30 * time.Second
	DefaultMaintenanceInterval = 15 * time.Second
)

// resolvedConfig is a validated WorkerConfig with every default applied and the SQL-facing units computed.
type resolvedConfig struct {
	WorkerConfig
	vtSeconds       int
	maxPollSeconds  int
	pollIntervalMs  int
	maintenanceOff  bool
	workerIDDefault bool
}

var uuidPattern = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// resolve validates c and applies the defaults. Every problem is reported, each naming the field and its value.
func (c WorkerConfig) resolve() (resolvedConfig, error) {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, fmt.Errorf("pgflow: WorkerConfig.%s = %v: %s", field, value, rule))
	}
	r := resolvedConfig{WorkerConfig: c}

	intField := func(field string, v *int, def int) {
		switch {
		case *v < 0:
			bad(field, *v, fmt.Sprintf("must be >= 1 (0 means the default, %d)", def))
		case *v == 0:
			*v = def
		case *v > math.MaxInt32:
			bad(field, *v, fmt.Sprintf("must be at most %d", math.MaxInt32))
		}
	}
	intField("MaxConcurrent", &r.MaxConcurrent, DefaultMaxConcurrent)
	intField("BatchSize", &r.BatchSize, DefaultBatchSize)

	durField := func(field string, v *time.Duration, def time.Duration) bool {
		if *v < 0 {
			bad(field, *v, fmt.Sprintf("must be positive (0 means the default, %s)", def))
			return false
		}
		if *v == 0 {
			*v = def
		}
		return true
	}
	// ceilUnits rounds d up to whole units and checks that the count fits the SQL integer argument.
	ceilUnits := func(field string, d, unit time.Duration) int {
		n := (d + unit - 1) / unit
		if n > math.MaxInt32 {
			bad(field, d, fmt.Sprintf("must be at most %s", time.Duration(math.MaxInt32)*unit))
			return 0
		}
		return int(n)
	}
	if durField("VisibilityTimeout", &r.VisibilityTimeout, DefaultVisibilityTimeout) {
		r.vtSeconds = ceilUnits("VisibilityTimeout", r.VisibilityTimeout, time.Second)
	}
	if durField("MaxPollWait", &r.MaxPollWait, DefaultMaxPollWait) {
		r.maxPollSeconds = ceilUnits("MaxPollWait", r.MaxPollWait, time.Second)
	}
	if durField("PollInterval", &r.PollInterval, DefaultPollInterval) {
		r.pollIntervalMs = ceilUnits("PollInterval", r.PollInterval, time.Millisecond)
	}
	durField("HeartbeatInterval", &r.HeartbeatInterval, DefaultHeartbeatInterval)
	durField("ShutdownTimeout", &r.ShutdownTimeout, DefaultShutdownTimeout)
	switch {
	case r.MaintenanceInterval < 0:
		r.maintenanceOff = true
	case r.MaintenanceInterval == 0:
		r.MaintenanceInterval = DefaultMaintenanceInterval
	}

	if r.WorkerID == "" {
		r.WorkerID = newUUID()
		r.workerIDDefault = true
	} else if !uuidPattern.MatchString(r.WorkerID) {
		bad("WorkerID", fmt.Sprintf("%q", r.WorkerID), "must be a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e (empty means a random one)")
	} else {
		r.WorkerID = strings.ToLower(r.WorkerID)
	}
	if r.Logger == nil {
		r.Logger = slog.Default()
	}
	if len(r.Flows) == 0 {
		bad("Flows", "[]", "give at least one flow, e.g. []pgflow.WorkerFlow{{Flow: myFlow}}")
	}
	// served records, per flow (lower-case slug), which entry serves the whole flow ("") or each step.
	served := map[string]map[string]int{}
	for i, f := range r.Flows {
		core := flowCoreOf(f.Flow)
		if core == nil {
			bad(fmt.Sprintf("Flows[%d].Flow", i), "nil", "create flows with NewFlow")
			continue
		}
		if f.MaxConcurrent < 0 {
			bad(fmt.Sprintf("Flows[%d].MaxConcurrent", i), f.MaxConcurrent, "must be >= 0 (0 means no limit of its own)")
		}
		if f.BatchSize < 0 || f.BatchSize > math.MaxInt32 {
			bad(fmt.Sprintf("Flows[%d].BatchSize", i), f.BatchSize, "must be between 0 (the worker's BatchSize) and 2147483647")
		}
		key := strings.ToLower(core.slug)
		if served[key] == nil {
			served[key] = map[string]int{}
		}
		if len(f.Steps) > 0 && !core.opts.queuePerStep {
			bad(fmt.Sprintf("Flows[%d].Steps", i), fmt.Sprintf("%q", f.Steps), fmt.Sprintf(
				"flow %q has one queue for all its steps; to serve chosen steps, define it with pgflow.QueuePerStep()", core.slug))
			continue
		}
		parts := f.Steps
		if len(parts) == 0 {
			parts = []string{""}
		}
		for _, step := range parts {
			if step != "" && core.step(step) == nil {
				bad(fmt.Sprintf("Flows[%d].Steps", i), fmt.Sprintf("%q", step), fmt.Sprintf("flow %q has no such step", core.slug))
				continue
			}
			if j, dup := served[key][step]; dup {
				what := fmt.Sprintf("step %q of flow %q", step, core.slug)
				if step == "" {
					what = fmt.Sprintf("flow %q", core.slug)
				}
				bad(fmt.Sprintf("Flows[%d]", i), what, fmt.Sprintf("is already served by Flows[%d]", j))
				continue
			}
			if j, whole := served[key][""]; whole && step != "" {
				bad(fmt.Sprintf("Flows[%d].Steps", i), fmt.Sprintf("%q", step), fmt.Sprintf("is already served by Flows[%d], which serves the whole flow %q", j, core.slug))
				continue
			}
			if step == "" && len(served[key]) > 0 {
				j := slices.Min(slices.Collect(maps.Values(served[key])))
				bad(fmt.Sprintf("Flows[%d]", i), fmt.Sprintf("flow %q", core.slug), fmt.Sprintf("has steps already served by Flows[%d]; list the remaining steps in Steps", j))
				continue
			}
			served[key][step] = i
		}
	}
	seenSchedules := map[string]bool{}
	for i, sc := range r.Schedules {
		switch {
		case sc == nil:
			bad(fmt.Sprintf("Schedules[%d]", i), "nil", "create schedules with NewSchedule")
		case sc.spec == nil:
			bad(fmt.Sprintf("Schedules[%d]", i), "a zero Schedule", "create schedules with NewSchedule")
		case seenSchedules[sc.name]:
			bad(fmt.Sprintf("Schedules[%d]", i), fmt.Sprintf("%q", sc.name), "is listed more than once")
		default:
			seenSchedules[sc.name] = true
		}
	}
	if len(errs) > 0 {
		return resolvedConfig{}, errors.Join(errs...)
	}
	return r, nil
}

// newUUID returns a random (version 4) UUID in canonical text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return formatUUID(b[:], 4)
}

// formatUUID stamps version (4: random, 5: name-based) and the RFC 4122 variant on the 16 bytes b and returns
// them in canonical text form.
func formatUUID(b []byte, version byte) string {
	b[6] = b[6]&0x0f | version<<4
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
