package executor

import (
	"context"
	"log/slog"
	"sync"
)

// taskLogger returns base with attrs added the way base.With(attrs...) adds them, but without the handler's work
// until a record is actually handled: text and JSON handlers format the attributes of With at once, which every
// task paid for (a few microseconds per task, in a worker whose debug records are off) though most tasks log
// nothing.
func taskLogger(base *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	return slog.New(&lazyAttrsHandler{base: base.Handler(), attrs: attrs})
}

// lazyAttrsHandler is base.WithAttrs(attrs), made on first use.
type lazyAttrsHandler struct {
	base  slog.Handler
	attrs []slog.Attr

	once     sync.Once
	resolved slog.Handler
}

func (h *lazyAttrsHandler) handler() slog.Handler {
	h.once.Do(func() { h.resolved = h.base.WithAttrs(h.attrs) })
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
	return &lazyAttrsHandler{base: h.base, attrs: append(append([]slog.Attr(nil), h.attrs...), attrs...)}
}

func (h *lazyAttrsHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.handler().WithGroup(name)
}
