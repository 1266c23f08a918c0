create or replace function pgflow.retry_run(run_id uuid, fresh boolean default false)
returns pgflow.runs
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow_slug text;
  v_run       pgflow.runs;
  v_reset     text[];
  v_restart   text[];
  v_events    jsonb[];
  v_group     record;
  v_ids       bigint[];
begin
  select r.flow_slug into v_flow_slug from pgflow.runs as r where r.run_id = retry_run.run_id;
  if not found then
    raise exception 'run % not found', coalesce(retry_run.run_id::text, 'NULL')
      using errcode = 'P0002';
  end if;
  -- The flow's compilation lock first (shared, as start_flow takes it), then the run: delete_flow_and_data holds
  -- the flow lock exclusively while it deletes runs.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(v_flow_slug)));

  select r.* into v_run from pgflow.runs as r where r.run_id = retry_run.run_id for update;
  if not found then
    raise exception 'run % not found', retry_run.run_id
      using errcode = 'P0002';
  end if;
  if v_run.status not in ('failed', 'cancelled') then
    raise exception 'run % is %: only failed or cancelled runs can be retried', v_run.run_id, v_run.status
      using errcode = '55000';
  end if;

  -- Fresh: a new run of the same flow with the same input, linked to this one.
  if coalesce(retry_run.fresh, false) then
    select s.* into v_run from pgflow.start_flow(v_run.flow_slug, v_run.input) as s;
    update pgflow.runs as r
       set retry_of = retry_run.run_id
     where r.run_id = v_run.run_id
    returning r.* into v_run;
    return v_run;
  end if;

  -- Resume in place. The steps to run again: failed ones, and the ones that never finished because the run
  -- ended (skipped run_failed / run_cancelled, or still created/started in a run that failed before v0.20.0).
  -- Completed steps keep their outputs; steps skipped by a decision the run already acted on (condition_unmet,
  -- handler_failed with when_exhausted skip, dependency_skipped) stay skipped.
  perform 1
     from pgflow.step_states as ss
    where ss.run_id = v_run.run_id
    order by ss.step_slug
      for update;
  v_reset := array(
    select ss.step_slug
      from pgflow.step_states as ss
     where ss.run_id = v_run.run_id
       and (ss.status in ('created', 'started', 'failed')
            or (ss.status = 'skipped' and ss.skip_reason in ('run_failed', 'run_cancelled')))
     order by ss.step_slug);
  -- Of those, the ones that had started have all their dependencies completed or skipped for good: they start
  -- again at once, on their existing task rows.
  v_restart := array(
    select distinct t.step_slug
      from pgflow.step_tasks as t
     where t.run_id = v_run.run_id
       and t.step_slug = any (v_reset)
     order by t.step_slug);

  -- Any message of a task to run again that is still live (runs failed before v0.20.0) goes to the archive.
  for v_group in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = v_run.run_id
       and t.step_slug = any (v_restart)
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_group.queue_name, v_group.msg_ids);
  end loop;

  -- Fresh attempts on the same rows: attempt numbers keep counting (a report of an attempt from before the retry
  -- stays fenced), the retry budget starts again (attempts_before_retry). Completed tasks of a map keep their
  -- outputs and are not run again.
  update pgflow.step_tasks as t
     set status = 'queued',
         attempts_before_retry = t.attempts_count,
         error_message = null,
         output = null,
         queued_at = now(),
         started_at = null,
         completed_at = null,
         failed_at = null,
         last_worker_id = null,
         requeued_count = 0,
         last_requeued_at = null,
         permanently_stalled_at = null,
         retry_at = null,
         message_id = null,
         queue_name = s.queue_name
    from pgflow.steps as s
   where t.run_id = v_run.run_id
     and t.step_slug = any (v_restart)
     and t.status <> 'completed'
     and s.flow_slug = t.flow_slug
     and s.step_slug = t.step_slug;

  update pgflow.step_states as ss
     set status = 'started',
         started_at = now(),
         remaining_deps = 0,
         remaining_tasks = (select count(*)::integer
                              from pgflow.step_tasks as t
                             where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'queued'),
         completed_at = null,
         failed_at = null,
         error_message = null,
         output = null,
         skip_reason = null,
         skipped_at = null
   where ss.run_id = v_run.run_id
     and ss.step_slug = any (v_restart);

  update pgflow.step_states as ss
     set status = 'created',
         remaining_deps = (select count(*)::integer
                             from pgflow.deps as d
                            where d.flow_slug = ss.flow_slug
                              and d.step_slug = ss.step_slug
                              and d.dep_slug = any (v_reset)),
         initial_tasks = case
                           when s.step_type = 'map' and exists (
                                  select 1 from pgflow.deps as d
                                   where d.flow_slug = ss.flow_slug
                                     and d.step_slug = ss.step_slug
                                     and d.dep_slug = any (v_reset))
                           then null
                           else ss.initial_tasks
                         end,
         remaining_tasks = null,
         started_at = null,
         completed_at = null,
         failed_at = null,
         error_message = null,
         output = null,
         skip_reason = null,
         skipped_at = null
    from pgflow.steps as s
   where ss.run_id = v_run.run_id
     and ss.step_slug = any (v_reset)
     and not ss.step_slug = any (v_restart)
     and s.flow_slug = ss.flow_slug
     and s.step_slug = ss.step_slug;

  update pgflow.runs as r
     set status = 'started',
         failed_at = null,
         cancelled_at = null,
         cancel_reason = null,
         remaining_steps = cardinality(v_reset)
   where r.run_id = v_run.run_id
  returning r.* into v_run;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'run:started',
      'run_id', v_run.run_id,
      'flow_slug', v_run.flow_slug,
      'input', v_run.input,
      'status', v_run.status,
      'remaining_steps', v_run.remaining_steps,
      'started_at', v_run.started_at,
      'retried', true),
    'run:started',
    v_run.run_id);

  -- The restarted steps: step:started each, then their messages (one send_batch per queue and start delay).
  select array_agg(jsonb_build_object(
                     'event_type', 'step:started',
                     'run_id', ss.run_id,
                     'flow_slug', ss.flow_slug,
                     'step_slug', ss.step_slug,
                     'status', ss.status,
                     'started_at', ss.started_at,
                     'remaining_tasks', ss.remaining_tasks,
                     'remaining_deps', ss.remaining_deps) order by s.step_index)
    into v_events
    from pgflow.step_states as ss
    join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
   where ss.run_id = v_run.run_id
     and ss.step_slug = any (v_restart);
  perform pgflow._emit_events(v_events);

  for v_group in
    select s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay,
           array_agg(t.step_slug order by t.step_slug, t.task_index) as slugs,
           array_agg(t.task_index order by t.step_slug, t.task_index) as idx
      from pgflow.step_tasks as t
      join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
     where t.run_id = v_run.run_id
       and t.step_slug = any (v_restart)
       and t.status = 'queued'
     group by s.queue_name, coalesce(s.opt_start_delay, 0)
     order by s.queue_name, coalesce(s.opt_start_delay, 0)
  loop
    -- send_batch returns the ids in array order, increasing: the n-th smallest id is the n-th message.
    v_ids := array(
      select m.msg_id
        from pgmq.send_batch(
               v_group.queue_name,
               array(select jsonb_build_object('flow_slug', v_run.flow_slug, 'run_id', v_run.run_id,
                                               'step_slug', x.slug, 'task_index', x.idx)
                       from unnest(v_group.slugs, v_group.idx) with ordinality as x (slug, idx, pos)
                      order by x.pos),
               v_group.start_delay) as m (msg_id)
       order by m.msg_id);
    update pgflow.step_tasks as t
       set message_id = x.msg_id
      from unnest(v_group.slugs, v_group.idx, v_ids) as x (slug, idx, msg_id)
     where t.run_id = v_run.run_id
       and t.step_slug = x.slug
       and t.task_index = x.idx;
    perform pgflow._wake_queue(v_group.queue_name, v_group.start_delay);
  end loop;

  -- Everything else follows the ordinary path: conditions of ready steps, taskless steps, ready steps start,
  -- and the run completes when nothing is left.
  if pgflow.cascade_resolve_conditions(v_run.run_id) then
    perform pgflow.cascade_complete_taskless_steps(v_run.run_id);
    perform pgflow.start_ready_steps(v_run.run_id);
    perform pgflow.maybe_complete_run(v_run.run_id);
  end if;

  select r.* into v_run from pgflow.runs as r where r.run_id = retry_run.run_id;
  return v_run;
end;
$$;

comment on function pgflow.retry_run(run_id uuid, fresh boolean) is $doc$
pgflow.retry_run(run_id, fresh) guarantees (v0.20.0; SECURITY INVOKER: the caller needs the table privileges a
worker has), in one transaction:
  * unknown run (or NULL): SQLSTATE P0002 'run <run_id> not found'; a run that is neither 'failed' nor
    'cancelled': SQLSTATE 55000 'run <run_id> is <status>: only failed or cancelled runs can be retried' -
    nothing changes;
  * locks: the flow's compilation lock (shared, as start_flow), then the run row, then its step states, so of two
    concurrent retries of a run the first resumes it and the second, once the first committed, sees it
    'started' and gets 55000; a retry and late results of the run are serialised the same way;
  * fresh => true: starts a new run of the same flow with the same input through pgflow.start_flow (the flow as
    it is now; run:started and everything start_flow guarantees), with retry_of = run_id; the original run is
    not changed; returns the new run (each call starts one);
  * fresh => false (resume in place): the run returns to 'started' (failed_at, cancelled_at, cancel_reason
    cleared; started_at kept) and run:started is emitted with "retried": true. Steps to run again: 'failed'
    ones, ones skipped with skip_reason 'run_failed' or 'run_cancelled', and any still 'created'/'started' (a run
    failed before v0.20.0). Every other step keeps its state: completed steps keep their outputs and task rows
    and are never run again; steps skipped by a decision the run already acted on (condition_unmet,
    handler_failed, dependency_skipped) stay skipped. remaining_steps = the number of steps to run again;
  * a step to run again that had tasks (all its dependencies completed or skipped for good) starts again at
    once: 'started' (started_at now), its non-completed tasks become 'queued' on the same rows with fresh
    attempts - attempts_before_retry = attempts_count, so the retry budget starts again while attempt numbers
    keep counting and a report of an attempt from before the retry changes nothing - and error, output,
    timestamps, worker, requeue and retry_at cleared; a map's completed tasks keep their outputs and are not run
    again (remaining_tasks counts the others); new messages go to the step's current queue (one send_batch per
    queue and start delay, opt_start_delay applies as at a first start, then pg_notify '' or a visible_at
    notification); step:started is emitted per such step in step_index order;
  * every other step to run again becomes 'created' with remaining_deps = its dependencies that run again and
    initial_tasks kept (NULL for a map whose dependency runs again, learnt when it completes);
  * then the ordinary path: conditions of ready steps are resolved (an unmet 'fail' condition fails the run
    again), taskless steps complete, ready steps start, and the run completes if nothing is left;
  * returns the run row as it is at the end.
$doc$;
