package executor

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// countingHandler counts the WithAttrs calls that reach the real handler.
type countingHandler struct {
	slog.Handler
	withAttrs *int
}

func (h countingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	*h.withAttrs++
	return countingHandler{Handler: h.Handler.WithAttrs(attrs), withAttrs: h.withAttrs}
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	return countingHandler{Handler: h.Handler.WithGroup(name), withAttrs: h.withAttrs}
}

// A task logger writes exactly what base.With would, and costs the handler nothing while nothing is logged.
func TestTaskLoggerWritesWhatWithWritesAndFormatsOnlyWhenUsed(t *testing.T) {
	t.Parallel()
	var want, got bytes.Buffer
	withAttrs := 0
	opts := &slog.HandlerOptions{Level: slog.LevelInfo,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}
	task := &Task{ClaimedTask: sqlapi.ClaimedTask{FlowSlug: "f", RunID: "r", StepSlug: "s", TaskIndex: 3, MsgID: 42, Attempt: 2},
		QueueName: "q", WorkerID: "w"}
	eager := slog.New(slog.NewJSONHandler(&want, opts)).With("flow", "f", "worker_id", "w", "queue", "q", "run_id", "r",
		"step", "s", "task_index", 3, "msg_id", "42", "attempt", 2)
	lazy := taskLogger(slog.New(countingHandler{Handler: slog.NewJSONHandler(&got, opts), withAttrs: &withAttrs}), task)

	lazy.Debug("not written")
	require.Zero(t, withAttrs, "nothing was handled, so nothing was formatted")
	require.False(t, lazy.Enabled(context.Background(), slog.LevelDebug))

	for _, l := range []*slog.Logger{eager, lazy} {
		l.Info("first", "k", 1)
		l.With("extra", true).Warn("second")
		l.WithGroup("g").With("in", "group").Error("third", "x", 2)
		l.Info("fourth")
	}
	require.Equal(t, want.String(), got.String())
	require.Equal(t, 3, withAttrs, "formatted once for the logger, once for its With and once before its group")
}
