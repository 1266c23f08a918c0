create or replace function pgflow.delete_flow_and_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_queue  record;
  v_listed text[];
  v_drop   text[] := '{}';
begin
  perform pg_advisory_xact_lock(1, hashtext(lower(p_flow_slug)));

  for v_queue in
    select distinct s.queue_name
      from pgflow.steps as s
     where s.flow_slug = p_flow_slug
    union
    select pgflow._default_queue_name(f.flow_slug)
      from pgflow.flows as f
     where f.flow_slug = p_flow_slug
       and f.queue_mode = 'flow'
       and not exists (select 1 from pgflow.steps as s where s.flow_slug = f.flow_slug)
     order by 1
  loop
    select coalesce(array_agg(q.queue_name::text order by q.queue_name), '{}') into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue.queue_name;

    if cardinality(v_listed) > 1 then
      raise exception using
        errcode = '55000',
        message = format(
          'Cannot delete flow "%s": its queue "%s" is listed by PGMQ under %s spellings (%s); nothing was deleted',
          p_flow_slug, v_queue.queue_name, cardinality(v_listed), array_to_string(v_listed, ', ')),
        hint = 'The spellings share one set of PGMQ tables. pgflow manages its queues exclusively and does not repair PGMQ metadata; resolve the duplicate listing by hand, then retry.';
    end if;
    v_drop := v_drop || v_listed;
  end loop;

  -- Tasks are found through their runs (idx_runs_flow_slug, then step_tasks_pkey): step_tasks has no index that
  -- starts with flow_slug.
  delete from pgflow.step_tasks as t
   where t.run_id in (select r.run_id from pgflow.runs as r where r.flow_slug = p_flow_slug)
     and t.flow_slug = p_flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs as r where r.flow_slug = p_flow_slug;
  delete from pgflow.deps as d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps as s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows as f where f.flow_slug = p_flow_slug;

  for i in 1 .. coalesce(cardinality(v_drop), 0) loop
    perform pgmq.drop_queue(v_drop[i]);
  end loop;
end;
$$;

comment on function pgflow.delete_flow_and_data(p_flow_slug text) is $doc$
pgflow.delete_flow_and_data(p_flow_slug) guarantees: removes the flow completely in the caller's transaction:
  * the flow's queues are its persisted routes (the distinct steps.queue_name of its steps: one queue, or one
    per step for a flow with per-step queues), or its default queue pgflow._default_queue_name(p_flow_slug) when
    the flow exists in queue mode 'flow' but has no steps (a flow in queue mode 'step' without steps has none);
  * each of those queues is resolved to the spelling PGMQ lists for it (pgmq.list_queues(), compared in lower
    case, so a mixed-case queue created by v0.16.0 is found); a queue listed under more than one spelling is
    ambiguous and raises an error naming the flow, the queue and the spellings BEFORE anything is deleted;
    a queue PGMQ does not list is already gone and is skipped;
  * then all of the flow's step_tasks, step_states, runs, deps, steps and the flow row are deleted, and every
    resolved queue is dropped with its archive by pgmq.drop_queue(listed spelling), which also removes that
    spelling's metadata. Messages are not archived one by one before their queue is dropped;
  * any failing PGMQ call fails the function, so the caller's transaction rolls back as a whole;
  * calls for one normalized slug are serialised with create_flow and ensure_flow_compiled by the
    transaction-level advisory lock (1, hashtext(lower(p_flow_slug)));
  * v0.20.0: a flow that has steps or a flow row must be deleted in a READ COMMITTED transaction: under REPEATABLE
    READ or SERIALIZABLE pgflow._guard_definition_keys refuses the delete (25000) and nothing is deleted;
  * destructive and irreversible; meant for development and for recompiling a changed flow. Workers rows are
    not touched. An unknown flow is not an error and touches no queue.
$doc$;
