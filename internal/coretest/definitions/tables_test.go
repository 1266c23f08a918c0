package definitions_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// The column order, names and types are part of the API: select *, returning * and row-to-jsonb follow them.
func TestTableColumns(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	want := map[string]string{
		"flows": "flow_slug text NOT NULL, opt_max_attempts integer NOT NULL 3, opt_base_delay integer NOT NULL 1, " +
			"opt_timeout integer NOT NULL 60, created_at timestamp with time zone NOT NULL now(), " +
			"queue_mode text NOT NULL 'flow'::text, message_retention text NOT NULL 'archive'::text",
		"steps": "flow_slug text NOT NULL, step_slug text NOT NULL, step_type text NOT NULL 'single'::text, " +
			"step_index integer NOT NULL 0, deps_count integer NOT NULL 0, opt_max_attempts integer, " +
			"opt_base_delay integer, opt_timeout integer, created_at timestamp with time zone NOT NULL now(), " +
			"opt_start_delay integer, required_input_pattern jsonb, forbidden_input_pattern jsonb, " +
			"when_unmet text NOT NULL 'skip'::text, when_exhausted text NOT NULL 'fail'::text, " +
			"queue_name text NOT NULL",
		"deps": "flow_slug text NOT NULL, dep_slug text NOT NULL, step_slug text NOT NULL, " +
			"created_at timestamp with time zone NOT NULL now()",
		"runs": "run_id uuid NOT NULL pgflow._new_run_id(), flow_slug text NOT NULL, status text NOT NULL 'started'::text, " +
			"input jsonb NOT NULL, output jsonb, remaining_steps integer NOT NULL 0, " +
			"started_at timestamp with time zone NOT NULL now(), completed_at timestamp with time zone, " +
			"failed_at timestamp with time zone, cancelled_at timestamp with time zone, cancel_reason text, " +
			"retry_of uuid",
		"step_states": "flow_slug text NOT NULL, run_id uuid NOT NULL, step_slug text NOT NULL, " +
			"status text NOT NULL 'created'::text, remaining_tasks integer, remaining_deps integer NOT NULL 0, " +
			"created_at timestamp with time zone NOT NULL now(), started_at timestamp with time zone, " +
			"completed_at timestamp with time zone, failed_at timestamp with time zone, error_message text, " +
			"initial_tasks integer, output jsonb, skip_reason text, skipped_at timestamp with time zone",
		"step_tasks": "flow_slug text NOT NULL, run_id uuid NOT NULL, step_slug text NOT NULL, message_id bigint, " +
			"task_index integer NOT NULL 0, status text NOT NULL 'queued'::text, attempts_count integer NOT NULL 0, " +
			"error_message text, output jsonb, queued_at timestamp with time zone NOT NULL now(), " +
			"completed_at timestamp with time zone, failed_at timestamp with time zone, " +
			"started_at timestamp with time zone, last_worker_id uuid, requeued_count integer NOT NULL 0, " +
			"last_requeued_at timestamp with time zone, permanently_stalled_at timestamp with time zone, " +
			"queue_name text NOT NULL, " +
			"retry_at timestamp with time zone, attempts_before_retry integer NOT NULL 0",
		"workers": "worker_id uuid NOT NULL, queue_name text NOT NULL, function_name text NOT NULL, " +
			"started_at timestamp with time zone NOT NULL now(), deprecated_at timestamp with time zone, " +
			"last_heartbeat_at timestamp with time zone NOT NULL now(), stopped_at timestamp with time zone, " +
			"listens_at timestamp with time zone, listener_pid integer",
		"worker_functions": "function_name text NOT NULL, enabled boolean NOT NULL true, " +
			"debounce interval NOT NULL '00:00:06'::interval, last_invoked_at timestamp with time zone, " +
			"created_at timestamp with time zone NOT NULL now(), updated_at timestamp with time zone NOT NULL now()",
		"schedules": "schedule_name text NOT NULL, flow_slug text NOT NULL, cron text NOT NULL, " +
			"time_zone text NOT NULL 'UTC'::text, input jsonb NOT NULL, missed text NOT NULL 'skip'::text, " +
			"max_catch_up integer NOT NULL 10, paused boolean NOT NULL false, " +
			"last_tick timestamp with time zone NOT NULL, last_run_id uuid, next_tick timestamp with time zone, " +
			"created_at timestamp with time zone NOT NULL now(), updated_at timestamp with time zone NOT NULL now(), " +
			"paused_at timestamp with time zone",
	}
	for table, cols := range want {
		got := queryVal[string](t, pool, `
			select string_agg(
			         concat_ws(' ', a.attname, format_type(a.atttypid, a.atttypmod),
			                   case when a.attnotnull then 'NOT NULL' end, pg_get_expr(d.adbin, d.adrelid)),
			         ', ' order by a.attnum)
			from pg_attribute a
			left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
			where a.attrelid = ('pgflow.' || $1)::regclass and a.attnum > 0 and not a.attisdropped`, table)
		require.Equal(t, cols, got, table)
	}
	require.Equal(t, len(want), count(t, pool, `select 1 from pg_tables where schemaname = 'pgflow' and tablename <> all($1)`,
		[]string{"schema_migrations"}), "no unexpected tables besides the migrator's")
}

func TestConstraintAndIndexNames(t *testing.T) {
	t.Parallel()
	pool := newDB(t)

	// v0.20.0 dropped step_states_flow_slug_fkey and step_tasks_run_id_fkey (the foreign keys to steps and to
	// step_states imply them) and the keys to the definitions runs_flow_slug_fkey,
	// step_states_flow_slug_step_slug_fkey and step_tasks_flow_slug_fkey (kept by the start and by
	// pgflow._guard_definition_keys: definition_keys_test.go); docs/pgflow-differences.md.
	wantConstraints := map[string]string{
		"flows": "flows_pkey message_retention_is_valid opt_base_delay_is_nonnegative opt_max_attempts_is_nonnegative opt_timeout_is_positive queue_mode_is_valid slug_is_valid",
		"steps": "forbidden_input_pattern_is_object opt_base_delay_is_nonnegative opt_max_attempts_is_nonnegative " +
			"opt_start_delay_is_nonnegative opt_timeout_is_positive required_input_pattern_is_object " +
			"steps_deps_count_check steps_flow_slug_fkey steps_flow_slug_step_index_key steps_pkey " +
			"steps_queue_name_is_valid steps_step_slug_check steps_step_type_check when_exhausted_is_valid when_unmet_is_valid",
		"deps": "deps_check deps_flow_slug_dep_slug_fkey deps_flow_slug_fkey deps_flow_slug_step_slug_fkey deps_pkey",
		"runs": "cancelled_at_is_after_started_at cancelled_at_only_when_cancelled " +
			"completed_at_is_after_started_at completed_at_or_failed_at failed_at_is_after_started_at " +
			"runs_pkey runs_remaining_steps_check status_is_valid",
		"step_states": "completed_at_is_after_started_at completed_at_or_failed_at_or_skipped_at " +
			"failed_at_is_after_started_at initial_tasks_known_when_started output_only_for_completed_or_null " +
			"remaining_tasks_state_consistency skip_reason_matches_status skipped_at_is_after_created_at " +
			"started_at_is_after_created_at status_and_remaining_tasks_match status_is_valid " +
			"step_states_initial_tasks_check " +
			"step_states_pkey step_states_remaining_deps_check step_states_run_id_fkey",
		"step_tasks": "attempts_before_retry_in_range attempts_count_nonnegative completed_at_is_after_queued_at completed_at_is_after_started_at " +
			"completed_at_or_failed_at failed_at_is_after_queued_at failed_at_is_after_started_at " +
			"output_valid_only_for_completed started_at_is_after_queued_at " +
			"step_tasks_last_worker_id_fkey step_tasks_pkey step_tasks_queue_name_is_valid " +
			"step_tasks_queue_name_message_id_key step_tasks_run_id_step_slug_fkey valid_status",
		"workers":          "workers_listener_pid_with_listens_at workers_pkey",
		"worker_functions": "worker_functions_debounce_check worker_functions_pkey",
		"schedules": "schedules_cron_not_empty schedules_flow_slug_fkey schedules_max_catch_up_in_range " +
			"schedules_missed_is_valid schedules_name_is_valid schedules_paused_at_only_when_paused schedules_pkey",
	}
	for table, names := range wantConstraints {
		got := queryVal[string](t, pool, `
			select string_agg(conname, ' ' order by conname collate "C")
			from pg_constraint where conrelid = ('pgflow.' || $1)::regclass`, table)
		require.Equal(t, names, got, table)
	}

	wantIndexes := strings.Join([]string{
		"deps: deps_pkey idx_deps_by_flow_dep idx_deps_by_flow_step",
		"flows: flows_default_queue_key flows_pkey",
		"runs: idx_runs_flow_slug idx_runs_started_at idx_runs_status runs_pkey",
		"schedules: idx_schedules_flow_slug schedules_pkey",
		// v0.19.0 dropped idx_step_states_run_id, idx_step_tasks_flow_run_step and idx_step_tasks_message_id
		// (covered by the primary keys and the queue identity key; docs/pgflow-differences.md).
		// v0.20.0 dropped idx_step_states_ready, idx_step_states_failed and idx_step_states_skipped (heap-only
		// updates of step states, TestTaskTransitionsWriteNoIndexEntries).
		"step_states: idx_step_states_flow_slug step_states_pkey",
		// v0.20.0 dropped idx_step_tasks_queued, idx_step_tasks_queued_msg and idx_step_tasks_completed (the same),
		// and idx_step_tasks_failed, idx_step_tasks_started and idx_step_tasks_last_worker, so that a task's claim and
		// completion are heap-only updates (TestTaskTransitionsWriteNoIndexEntries).
		"step_tasks: step_tasks_pkey step_tasks_queue_name_message_id_key",
		"steps: steps_flow_slug_step_index_key steps_pkey",
		"worker_functions: worker_functions_pkey",
		// v0.20.0 added idx_workers_listening (pgflow._wake_queue's lookup of a queue's alive listening workers).
		"workers: idx_workers_heartbeat idx_workers_listening idx_workers_queue_name workers_pkey",
	}, "\n")
	got := queryVal[string](t, pool, `
		select string_agg(line, E'\n' order by line)
		from (select tablename || ': ' || string_agg(indexname, ' ' order by indexname collate "C") as line
		      from pg_indexes where schemaname = 'pgflow' and tablename in
		        ('flows', 'steps', 'deps', 'runs', 'step_states', 'step_tasks', 'workers', 'worker_functions',
		         'schedules')
		      group by tablename) as t`)
	require.Equal(t, wantIndexes, got)

	// Room on each page for the versions of heap-only updates (v0.20.0).
	require.Equal(t, []string{"step_states {fillfactor=70}", "step_tasks {fillfactor=70}"},
		queryVal[[]string](t, pool, `select array_agg(relname || ' ' || reloptions::text order by relname)
			from pg_class where oid in ('pgflow.step_tasks'::regclass, 'pgflow.step_states'::regclass)`))
	// Partial index predicates and key columns matter for the planner; pin the less obvious ones.
	require.Equal(t, "CREATE INDEX idx_workers_listening ON pgflow.workers USING btree (queue_name, last_heartbeat_at) "+
		"WHERE ((stopped_at IS NULL) AND (deprecated_at IS NULL) AND (listens_at IS NOT NULL))",
		queryVal[string](t, pool, `select indexdef from pg_indexes where indexname = 'idx_workers_listening'`))
	require.Equal(t, "FOREIGN KEY (last_worker_id) REFERENCES pgflow.workers(worker_id) ON DELETE SET NULL",
		queryVal[string](t, pool, `select pg_get_constraintdef(oid) from pg_constraint where conname = 'step_tasks_last_worker_id_fkey'`))
	require.Equal(t, 1, count(t, pool, `select 1 from information_schema.check_constraints
		where constraint_schema = 'pgflow' and constraint_name = 'initial_tasks_known_when_started'`))

	// v0.17.0 queue identity: canonical queue names, (queue_name, message_id) unique, one default queue per flow.
	require.Equal(t, "CREATE UNIQUE INDEX flows_default_queue_key ON pgflow.flows USING btree (pgflow._default_queue_name(flow_slug))",
		queryVal[string](t, pool, `select indexdef from pg_indexes where indexname = 'flows_default_queue_key'`))
	require.Equal(t, "UNIQUE (queue_name, message_id)",
		queryVal[string](t, pool, `select pg_get_constraintdef(oid) from pg_constraint where conname = 'step_tasks_queue_name_message_id_key'`))
	for _, c := range []string{"steps_queue_name_is_valid", "step_tasks_queue_name_is_valid"} {
		require.Equal(t, "CHECK (((queue_name ~ '^[a-z_][a-z0-9_]*$'::text) AND (length(queue_name) <= 47)))",
			queryVal[string](t, pool, `select pg_get_constraintdef(oid) from pg_constraint where conname = $1`, c), c)
	}
}

func TestStepTaskRecordType(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	got := queryVal[string](t, pool, `
		select string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' order by a.attnum)
		from pg_attribute a where a.attrelid = 'pgflow.step_task_record'::regclass and a.attnum > 0`)
	require.Equal(t, "flow_slug text, run_id uuid, step_slug text, input jsonb, msg_id bigint, task_index integer, flow_input jsonb", got)
}

// The two foreign keys v0.20.0 dropped as implied by others guarded rows that are still refused: a task of a run that
// does not exist (its step state does not exist either), and deleting a run that rows still reference. (A step
// state of a step that does not exist is no longer refused on insert: that key went too, for its cost, and only
// the start writes step states - definition_keys_test.go.)
func TestImpliedForeignKeysStillHold(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, "select pgflow.create_flow('fk'); select pgflow.add_step('fk', 'a')")
	runID := queryVal[string](t, pool, "select r.run_id::text from pgflow.start_flow('fk', '{}') as r")

	violates := func(constraint, sql string, args ...any) {
		t.Helper()
		err := execErr(pool, sql, args...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, sql)
		require.Equal(t, "23503", pgErr.Code, pgErr.Message)
		if constraint != "" {
			require.Equal(t, constraint, pgErr.ConstraintName, pgErr.Message)
		}
	}
	violates("step_tasks_run_id_step_slug_fkey", `insert into pgflow.step_tasks (flow_slug, run_id, step_slug, queue_name)
		values ('fk', '00000000-0000-4000-8000-000000000001', 'a', 'fk')`)
	violates("step_states_run_id_fkey", `delete from pgflow.runs where run_id = $1`, runID)
	violates("runs_flow_slug_fkey", `delete from pgflow.flows where flow_slug = 'fk'`)
	require.Equal(t, 1, count(t, pool, `select 1 from pgflow.step_tasks where run_id = $1`, runID), "nothing changed")
}

// The queue-name checks were rewritten in v0.20.0 (the length apart from the pattern, cheaper to evaluate on every
// write of a task): they must accept exactly the names the rule before, '^[a-z_][a-z0-9_]{0,46}$', accepted.
func TestQueueNameChecksAcceptWhatTheOldRuleAccepted(t *testing.T) {
	t.Parallel()
	pool := newDB(t)
	mustExec(t, pool, "select pgflow.create_flow('qn'); select pgflow.add_step('qn', 'a')")
	runID := queryVal[string](t, pool, "select r.run_id::text from pgflow.start_flow('qn', '{}') as r")
	names := []string{"", "a", "_", "__", "z9", "a_b_9", "9a", "A", "aB", "a-b", "a b", " a", "a\n", "\na", "é", "aé",
		"ａ", "ab$", "a.b", "a*", strings.Repeat("a", 46), strings.Repeat("a", 47), strings.Repeat("a", 48),
		"_" + strings.Repeat("9", 46), "_" + strings.Repeat("9", 47), strings.Repeat("é", 10)}
	for _, name := range names {
		old := queryVal[bool](t, pool, `select $1::text ~ '^[a-z_][a-z0-9_]{0,46}$'`, name)
		for _, stmt := range []struct{ constraint, sql string }{
			{"step_tasks_queue_name_is_valid", `update pgflow.step_tasks set queue_name = $1 where run_id = $2::uuid`},
			{"steps_queue_name_is_valid", `update pgflow.steps set queue_name = $1 where flow_slug = 'qn' and $2::text is not null`},
		} {
			tx, err := pool.Begin(context.Background())
			require.NoError(t, err)
			_, err = tx.Exec(context.Background(), stmt.sql, name, runID)
			require.NoError(t, tx.Rollback(context.Background()))
			if old {
				require.NoError(t, err, "%q must be accepted by %s", name, stmt.constraint)
				continue
			}
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, "%q must be refused by %s", name, stmt.constraint)
			require.Equal(t, "23514", pgErr.Code, pgErr.Message)
			require.Equal(t, stmt.constraint, pgErr.ConstraintName, "%q", name)
		}
	}
}
