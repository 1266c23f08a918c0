package bench

import (
	"context"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// statementTimer is a pgx tracer that counts the statements its connections send and times the calls of the
// engine's functions, as the client sees them (the round trip included). It times without pg_stat_statements,
// which needs shared_preload_libraries and is often missing. A batch is one round trip: its time goes to the
// function its first statement calls.
type statementTimer struct {
	mu    sync.Mutex
	calls map[string]*callTime
	n     int64
}

type callTime struct {
	calls int64
	total time.Duration
}

// StatementTime is the client-side time of the calls of one function.
type StatementTime struct {
	Function string  `json:"function"`
	Calls    int64   `json:"calls"`
	MeanMs   float64 `json:"mean_ms"`
	// RatioToBaseline divides MeanMs by the mean latency of the baseline transaction measured next to it.
	RatioToBaseline float64 `json:"ratio_to_baseline"`
}

// calledFunction finds the first pgflow or pgmq function a statement calls.
var calledFunction = regexp.MustCompile(`\b(pgflow|pgmq)\.([a-z_]+)\s*\(`)

func functionOf(sql string) string {
	if m := calledFunction.FindStringSubmatch(sql); m != nil {
		return m[1] + "." + m[2]
	}
	return "other"
}

type timerKey struct{}

type timerStart struct {
	at       time.Time
	function string
}

func newStatementTimer() *statementTimer { return &statementTimer{calls: map[string]*callTime{}} }

func (t *statementTimer) record(ctx context.Context) {
	s, ok := ctx.Value(timerKey{}).(*timerStart)
	if !ok || s.function == "" {
		return
	}
	d := time.Since(s.at)
	t.mu.Lock()
	c := t.calls[s.function]
	if c == nil {
		c = &callTime{}
		t.calls[s.function] = c
	}
	c.calls++
	c.total += d
	t.mu.Unlock()
}

func (t *statementTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
	return context.WithValue(ctx, timerKey{}, &timerStart{at: time.Now(), function: functionOf(d.SQL)})
}

func (t *statementTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	t.record(ctx)
}

func (t *statementTimer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, timerKey{}, &timerStart{at: time.Now()})
}

func (t *statementTimer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
	// A batch is timed as the first engine function it calls (a deferred call's batch starts with set_config).
	if s, ok := ctx.Value(timerKey{}).(*timerStart); ok && (s.function == "" || s.function == "other") {
		s.function = functionOf(d.SQL)
	}
}

func (t *statementTimer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	t.record(ctx)
}

// statements returns how many statements were sent (each statement of a batch counts).
func (t *statementTimer) statements() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.n
}

// times returns the mean time per function, sorted by name; "other" (statements calling no engine function) is
// left out. The ratios are set once the baseline is known (after the scenarios).
func (t *statementTimer) times() []StatementTime {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []StatementTime
	for f, c := range t.calls {
		if f == "other" || c.calls == 0 {
			continue
		}
		mean := ms(c.total) / float64(c.calls)
		out = append(out, StatementTime{Function: f, Calls: c.calls, MeanMs: mean})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Function < out[j].Function })
	return out
}
