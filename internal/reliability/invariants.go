package reliability

import (
	"context"
	"fmt"
	"strings"

	"github.com/pgflow-go/pgflow/internal/sqlapi"
)

// RecordedSteps are the steps whose handlers record invocations and return an Output.
var RecordedSteps = []string{"work", "each"}

// Invariants are the end-of-load facts about one flow, read from the database in one snapshot (call Read inside
// a repeatable-read transaction for a consistent view, or after the load is over).
type Invariants struct {
	Flow string `json:"flow"`

	Runs           int64 `json:"runs"`
	RunsCompleted  int64 `json:"runs_completed"`
	RunsFailed     int64 `json:"runs_failed"`
	RunsUnfinished int64 `json:"runs_unfinished"`

	Tasks           int64 `json:"tasks"`
	TasksCompleted  int64 `json:"tasks_completed"`
	TasksFailed     int64 `json:"tasks_failed"`
	TasksUnfinished int64 `json:"tasks_unfinished"`
	Attempts        int64 `json:"attempts"` // sum of step_tasks.attempts_count
	Requeued        int64 `json:"requeued"` // sum of step_tasks.requeued_count

	// Recorded steps only (RecordedSteps), when reliability.invocations exists (HasInvocations).
	HasInvocations     bool  `json:"has_invocations"`
	RecordedTasks      int64 `json:"recorded_tasks"`       // tasks of recorded steps
	Invocations        int64 `json:"invocations"`          // handler starts recorded
	ReinvokedTasks     int64 `json:"reinvoked_tasks"`      // tasks whose handler started more than once
	ResultsNotOwnTask  int64 `json:"results_not_own_task"` // completed tasks whose output names no invocation of that very task
	CompletedNoResults int64 `json:"completed_no_result"`  // completed recorded tasks with no output

	// Events, when realtime.captured exists (HasEvents).
	HasEvents           bool  `json:"has_events"`
	RunStartedEvents    int64 `json:"run_started_events"`
	RunTerminalEvents   int64 `json:"run_terminal_events"`    // run:completed + run:failed
	RunsWithDupTerminal int64 `json:"runs_with_dup_terminal"` // runs with more than one terminal event
	StepCompletedEvents int64 `json:"step_completed_events"`
	StepsWithDupEvents  int64 `json:"steps_with_dup_events"` // (run, step) pairs with more than one step:completed

	QueueLength int64 `json:"queue_length"` // messages still in the flow's queue (neither archived nor deleted)
}

// Read computes the invariants of flow.
func Read(ctx context.Context, db sqlapi.DBTX, flow string) (Invariants, error) {
	inv := Invariants{Flow: flow}
	err := db.QueryRow(ctx, `
		select count(*),
		       count(*) filter (where r.status = 'completed'),
		       count(*) filter (where r.status = 'failed'),
		       count(*) filter (where r.status not in ('completed', 'failed'))
		  from pgflow.runs as r where r.flow_slug = $1`, flow).
		Scan(&inv.Runs, &inv.RunsCompleted, &inv.RunsFailed, &inv.RunsUnfinished)
	if err != nil {
		return inv, fmt.Errorf("reliability: read runs of flow %q: %w", flow, err)
	}
	err = db.QueryRow(ctx, `
		select count(*),
		       count(*) filter (where t.status = 'completed'),
		       count(*) filter (where t.status = 'failed'),
		       count(*) filter (where t.status not in ('completed', 'failed')),
		       coalesce(sum(t.attempts_count), 0),
		       coalesce(sum(t.requeued_count), 0)
		  from pgflow.step_tasks as t where t.flow_slug = $1`, flow).
		Scan(&inv.Tasks, &inv.TasksCompleted, &inv.TasksFailed, &inv.TasksUnfinished, &inv.Attempts, &inv.Requeued)
	if err != nil {
		return inv, fmt.Errorf("reliability: read tasks of flow %q: %w", flow, err)
	}

	err = db.QueryRow(ctx, `select to_regclass('reliability.invocations') is not null, to_regclass('realtime.captured') is not null`).
		Scan(&inv.HasInvocations, &inv.HasEvents)
	if err != nil {
		return inv, fmt.Errorf("reliability: look for the capture tables: %w", err)
	}
	if inv.HasInvocations {
		err = db.QueryRow(ctx, `
			with tasks as (
			  select t.run_id, t.step_slug, t.task_index, t.status, t.output
			    from pgflow.step_tasks as t
			   where t.flow_slug = $1 and t.step_slug = any ($2::text[])
			), inv as (
			  select i.run_id, i.step_slug, i.task_index, count(*) as n
			    from reliability.invocations as i
			    join pgflow.runs as r on r.run_id = i.run_id
			   where r.flow_slug = $1 and i.step_slug = any ($2::text[])
			   group by 1, 2, 3
			)
			select (select count(*) from tasks),
			       (select coalesce(sum(n), 0) from inv),
			       (select count(*) from inv where n > 1),
			       (select count(*) from tasks as t
			         where t.status = 'completed' and t.output is not null
			           and not exists (
			             select 1 from reliability.invocations as i
			              where i.id::text = t.output ->> 'invocation'
			                and i.run_id = t.run_id and i.step_slug = t.step_slug and i.task_index = t.task_index)),
			       (select count(*) from tasks as t where t.status = 'completed' and t.output is null)`,
			flow, RecordedSteps).
			Scan(&inv.RecordedTasks, &inv.Invocations, &inv.ReinvokedTasks, &inv.ResultsNotOwnTask, &inv.CompletedNoResults)
		if err != nil {
			return inv, fmt.Errorf("reliability: read invocations of flow %q: %w", flow, err)
		}
	}
	if inv.HasEvents {
		err = db.QueryRow(ctx, `
			with ev as (
			  select c.payload ->> 'event_type' as type, (c.payload ->> 'run_id')::uuid as run_id,
			         c.payload ->> 'step_slug' as step_slug
			    from realtime.captured as c
			    join pgflow.runs as r on r.run_id = (c.payload ->> 'run_id')::uuid
			   where r.flow_slug = $1
			)
			select (select count(*) from ev where type = 'run:started'),
			       (select count(*) from ev where type in ('run:completed', 'run:failed')),
			       (select count(*) from (select run_id from ev where type in ('run:completed', 'run:failed')
			                              group by run_id having count(*) > 1) as d),
			       (select count(*) from ev where type = 'step:completed'),
			       (select count(*) from (select run_id, step_slug from ev where type = 'step:completed'
			                              group by run_id, step_slug having count(*) > 1) as d)`, flow).
			Scan(&inv.RunStartedEvents, &inv.RunTerminalEvents, &inv.RunsWithDupTerminal, &inv.StepCompletedEvents, &inv.StepsWithDupEvents)
		if err != nil {
			return inv, fmt.Errorf("reliability: read events of flow %q: %w", flow, err)
		}
	}
	err = db.QueryRow(ctx, `select m.queue_length from pgmq.metrics(pgflow._default_queue_name($1::text)) as m`, flow).Scan(&inv.QueueLength)
	if err != nil {
		return inv, fmt.Errorf("reliability: read the queue of flow %q: %w", flow, err)
	}
	return inv, nil
}

// Problems lists every broken promise, for a load in which every run should complete: a run not completed, a
// task not completed, a result that is not one of its own task's invocations, a duplicated or missing terminal
// event or step completion, a message left in the queue. With exactOnce (no fault was injected) it also requires
// one handler invocation and one attempt per task. An empty list means all invariants hold.
func (inv Invariants) Problems(exactOnce bool) []string {
	var p []string
	add := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if inv.RunsCompleted != inv.Runs {
		add("%d of %d runs completed (%d failed, %d unfinished)", inv.RunsCompleted, inv.Runs, inv.RunsFailed, inv.RunsUnfinished)
	}
	if inv.TasksCompleted != inv.Tasks {
		add("%d of %d tasks completed (%d failed, %d unfinished)", inv.TasksCompleted, inv.Tasks, inv.TasksFailed, inv.TasksUnfinished)
	}
	if inv.HasInvocations {
		if inv.ResultsNotOwnTask != 0 {
			add("%d completed tasks hold a result that is not from an invocation of that task", inv.ResultsNotOwnTask)
		}
		if inv.CompletedNoResults != 0 {
			add("%d completed tasks have no output", inv.CompletedNoResults)
		}
		if inv.Invocations < inv.RecordedTasks {
			add("%d handler invocations for %d tasks", inv.Invocations, inv.RecordedTasks)
		}
		if exactOnce && (inv.Invocations != inv.RecordedTasks || inv.ReinvokedTasks != 0) {
			add("without faults every handler should run once: %d invocations for %d tasks, %d tasks run more than once",
				inv.Invocations, inv.RecordedTasks, inv.ReinvokedTasks)
		}
	}
	if exactOnce && inv.Attempts != inv.Tasks {
		add("without faults attempts should equal tasks: %d attempts for %d tasks", inv.Attempts, inv.Tasks)
	}
	if inv.HasEvents {
		if inv.RunStartedEvents != inv.Runs {
			add("%d run:started events for %d runs", inv.RunStartedEvents, inv.Runs)
		}
		if inv.RunTerminalEvents != inv.Runs || inv.RunsWithDupTerminal != 0 {
			add("%d terminal run events for %d runs (%d runs with more than one)", inv.RunTerminalEvents, inv.Runs, inv.RunsWithDupTerminal)
		}
		if inv.StepsWithDupEvents != 0 {
			add("%d steps completed more than once", inv.StepsWithDupEvents)
		}
	}
	if inv.QueueLength != 0 {
		add("%d messages left in the queue", inv.QueueLength)
	}
	return p
}

// String renders the invariants as aligned "name: value" lines.
func (inv Invariants) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "flow %s\n", inv.Flow)
	fmt.Fprintf(&b, "  runs:        %d (completed %d, failed %d, unfinished %d)\n", inv.Runs, inv.RunsCompleted, inv.RunsFailed, inv.RunsUnfinished)
	fmt.Fprintf(&b, "  tasks:       %d (completed %d, failed %d, unfinished %d)\n", inv.Tasks, inv.TasksCompleted, inv.TasksFailed, inv.TasksUnfinished)
	fmt.Fprintf(&b, "  attempts:    %d (requeued %d)\n", inv.Attempts, inv.Requeued)
	if inv.HasInvocations {
		fmt.Fprintf(&b, "  handlers:    %d invocations for %d recorded tasks (%d tasks run more than once, %d results not from their own task)\n",
			inv.Invocations, inv.RecordedTasks, inv.ReinvokedTasks, inv.ResultsNotOwnTask)
	}
	if inv.HasEvents {
		fmt.Fprintf(&b, "  events:      run:started %d, terminal %d (dup %d), step:completed %d (dup %d)\n",
			inv.RunStartedEvents, inv.RunTerminalEvents, inv.RunsWithDupTerminal, inv.StepCompletedEvents, inv.StepsWithDupEvents)
	}
	fmt.Fprintf(&b, "  queue:       %d messages left\n", inv.QueueLength)
	return b.String()
}
