package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// InvocationsSQL creates the table handlers record their invocations in (reliability.invocations).
const InvocationsSQL = `
create schema if not exists reliability;
create table if not exists reliability.invocations (
  id          bigint generated always as identity primary key,
  run_id      uuid        not null,
  step_slug   text        not null,
  task_index  integer     not null,
  attempt     integer     not null,
  worker_id   uuid        not null,
  pid         integer     not null,
  started_at  timestamptz not null default clock_timestamp()
);
create index if not exists invocations_task on reliability.invocations (run_id, step_slug, task_index);
`

// EventsSQL creates a realtime.send function that keeps every event pgflow emits in realtime.captured
// (pgflow._emit_event calls realtime.send when it exists), so tests can count events exactly.
const EventsSQL = `
create schema if not exists realtime;
create table if not exists realtime.captured (
  id      bigint generated always as identity primary key,
  payload jsonb   not null,
  event   text    not null,
  topic   text    not null,
  private boolean not null
);
create or replace function realtime.send(payload jsonb, event text, topic text, private boolean)
returns void
language sql
security definer
set search_path = pg_catalog, pg_temp
as $fn$
  insert into realtime.captured (payload, event, topic, private) values (payload, event, topic, private);
$fn$;
`

// Setup runs InvocationsSQL and EventsSQL.
func Setup(ctx context.Context, db sqlapi.DBTX) error {
	if _, err := db.Exec(ctx, InvocationsSQL+EventsSQL); err != nil {
		return fmt.Errorf("reliability: set up invocation and event capture: %w", err)
	}
	return nil
}

// SetupEvents runs EventsSQL only (for workers that record invocations elsewhere, e.g. with a MemRecorder).
func SetupEvents(ctx context.Context, db sqlapi.DBTX) error {
	if _, err := db.Exec(ctx, EventsSQL); err != nil {
		return fmt.Errorf("reliability: set up event capture: %w", err)
	}
	return nil
}

// DBRecorder records invocations in reliability.invocations (see Setup).
type DBRecorder struct {
	DB  sqlapi.DBTX
	PID int // process id stored with each invocation
}

// Started inserts one invocation row and returns its id.
func (r DBRecorder) Started(ctx context.Context, m pgflow.TaskMeta) (string, error) {
	var id int64
	err := r.DB.QueryRow(ctx,
		`insert into reliability.invocations (run_id, step_slug, task_index, attempt, worker_id, pid)
		 values ($1::uuid, $2, $3, $4, $5::uuid, $6) returning id`,
		m.RunID, m.StepSlug, m.TaskIndex, m.Attempt, m.WorkerID, r.PID).Scan(&id)
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(id, 10), nil
}

// Invocation is one recorded handler start.
type Invocation struct {
	ID   string
	Meta pgflow.TaskMeta
}

// MemRecorder records invocations in memory (in-process workers, e.g. while the database is down).
type MemRecorder struct {
	mu   sync.Mutex
	list []Invocation
}

// Started appends the invocation; ids are "m1", "m2", …
func (r *MemRecorder) Started(_ context.Context, m pgflow.TaskMeta) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := "m" + strconv.Itoa(len(r.list)+1)
	r.list = append(r.list, Invocation{ID: id, Meta: m})
	return id, nil
}

// List returns a copy of the recorded invocations.
func (r *MemRecorder) List() []Invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Invocation(nil), r.list...)
}

// FileGate releases hanging handlers once the file Dir/release exists; tests of worker subprocesses create it.
type FileGate struct{ Dir string }

// ReleasePath is the file whose existence opens the gate.
func (g FileGate) ReleasePath() string { return filepath.Join(g.Dir, "release") }

// Wait polls for the release file.
func (g FileGate) Wait(ctx context.Context, _ pgflow.TaskMeta) error {
	for {
		if _, err := os.Stat(g.ReleasePath()); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// ChanGate releases hanging handlers when Release is called; it reports every waiting handler on Waiting.
type ChanGate struct {
	once    sync.Once
	release chan struct{}
	Waiting chan pgflow.TaskMeta // buffered; a handler that starts waiting sends its meta (dropped when full)
}

// NewChanGate returns a closed-until-released gate.
func NewChanGate() *ChanGate {
	return &ChanGate{release: make(chan struct{}), Waiting: make(chan pgflow.TaskMeta, 1024)}
}

// Wait blocks until Release or ctx ends.
func (g *ChanGate) Wait(ctx context.Context, m pgflow.TaskMeta) error {
	select {
	case g.Waiting <- m:
	default:
	}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release opens the gate for every present and future waiter.
func (g *ChanGate) Release() { g.once.Do(func() { close(g.release) }) }
