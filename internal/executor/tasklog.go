package executor

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
)

// taskLogger returns base with the task's attributes (flow, worker_id, queue, run_id, step, task_index, msg_id,
// attempt) added the way base.With adds them, but without the work until a record is actually handled: text and
// JSON handlers format the attributes of With at once, and even building the attributes (a slice, the message
// id's text) cost every task something though most tasks log nothing.
func taskLogger(base *slog.Logger, t *Task) *slog.Logger {
	return slog.New(&lazyAttrsHandler{base: base.Handler(), id: taskIdentity{flow: t.FlowSlug, workerID: t.WorkerID,
		queue: t.QueueName, runID: t.RunID, step: t.StepSlug, taskIndex: t.TaskIndex, msgID: t.MsgID, attempt: t.Attempt}})
}

// taskIdentity is what a task's log records carry.
type taskIdentity struct {
	flow, workerID, queue, runID, step string
	taskIndex, attempt                 int
	msgID                              int64
}

func (id *taskIdentity) attrs(extra []slog.Attr) []slog.Attr {
	return append([]slog.Attr{slog.String("flow", id.flow), slog.String("worker_id", id.workerID),
		slog.String("queue", id.queue), slog.String("run_id", id.runID), slog.String("step", id.step),
		slog.Int("task_index", id.taskIndex), slog.String("msg_id", strconv.FormatInt(id.msgID, 10)),
		slog.Int("attempt", id.attempt)}, extra...)
}

// lazyAttrsHandler is base.WithAttrs(the task's attributes, then extra), made on first use.
type lazyAttrsHandler struct {
	base  slog.Handler
	id    taskIdentity
	extra []slog.Attr

	once     sync.Once
	resolved slog.Handler
}

func (h *lazyAttrsHandler) handler() slog.Handler {
	h.once.Do(func() { h.resolved = h.base.WithAttrs(h.id.attrs(h.extra)) })
	return h.resolved
}

func (h *lazyAttrsHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.base.Enabled(ctx, level)
}

func (h *lazyAttrsHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h *lazyAttrsHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return &lazyAttrsHandler{base: h.base, id: h.id, extra: append(append([]slog.Attr(nil), h.extra...), attrs...)}
}

func (h *lazyAttrsHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.handler().WithGroup(name)
}
