create or replace function pgflow.cancel_run(run_id uuid, reason text default null)
returns pgflow.runs
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run pgflow.runs;
begin
  select r.* into v_run from pgflow.runs as r where r.run_id = cancel_run.run_id for update;
  if not found then
    raise exception 'run % not found', coalesce(cancel_run.run_id::text, 'NULL')
      using errcode = 'P0002';
  end if;
  if v_run.status <> 'started' then
    raise exception 'run % is already %', v_run.run_id, v_run.status
      using errcode = '55000';
  end if;

  perform pgflow._finish_run_steps(v_run.run_id, 'run_cancelled');

  update pgflow.runs as r
     set status = 'cancelled',
         cancelled_at = now(),
         cancel_reason = cancel_run.reason
   where r.run_id = v_run.run_id
  returning r.* into v_run;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'run:cancelled',
      'run_id', v_run.run_id,
      'flow_slug', v_run.flow_slug,
      'status', v_run.status,
      'cancel_reason', v_run.cancel_reason,
      'cancelled_at', v_run.cancelled_at),
    'run:cancelled',
    v_run.run_id);

  return v_run;
end;
$$;

comment on function pgflow.cancel_run(run_id uuid, reason text) is $doc$
pgflow.cancel_run(run_id, reason) guarantees (v0.20.0; SECURITY INVOKER: the caller needs the table privileges a
worker has), in one transaction:
  * unknown run (or NULL): SQLSTATE P0002 'run <run_id> not found'; a run that is not 'started': SQLSTATE 55000
    'run <run_id> is already <completed|failed|cancelled>' - nothing changes in either case;
  * the run row is locked first (as complete_task, fail_task and retry_run lock it), so a cancel and a result of
    the same run are serialised: a result recorded before the cancel stays, one arriving after changes nothing;
  * the run becomes 'cancelled' (cancelled_at now, cancel_reason = reason, NULL allowed); no step starts any
    more (start_ready_steps and start_tasks only act on 'started' runs);
  * through pgflow._finish_run_steps(run_id, 'run_cancelled'): its 'created'/'started' steps become 'skipped'
    (skip_reason 'run_cancelled', step:skipped each), its 'queued'/'started' tasks become 'cancelled', their
    messages are archived from the queues the tasks stored, and every queue with a started task of the run gets
    pg_notify('pgflow:queue:<queue>', '{"cancel_run":"<run_id>"}') so workers cancel the running handlers. A late
    complete_task, complete_tasks or fail_task of a cancelled task changes nothing (fenced by status; with or
    without attempt);
  * completed and failed steps and tasks keep their status and outputs; the run's remaining_steps counts the
    steps that are neither completed nor skipped;
  * run:cancelled is emitted last ({event_type, run_id, flow_slug, status, cancel_reason, cancelled_at}) on the
    usual channels ('pgflow', 'pgflow:run:<run_id>', realtime);
  * returns the run row as it is at the end. pgflow.retry_run can resume or re-run a cancelled run.
$doc$;
