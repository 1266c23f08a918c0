-- pgflow._guard_definition_keys: the delete side of the three foreign keys from the runtime tables to the
-- definitions that v0.20.0 left out (runs_flow_slug_fkey, step_states_flow_slug_step_slug_fkey,
-- step_tasks_flow_slug_fkey; see sql/core/0023_table_runs.sql). Their insert side is the start's: start_flow and
-- start_flows lock the flow's row once per call and refuse an unknown flow with runs_flow_slug_fkey's error, and
-- every other row of a run is made from rows of steps of the run's flow.
--
-- Row triggers (before delete, before update of the key) on flows and steps, and statement triggers after truncate.
-- A row trigger takes the flow's lock exclusively (pgflow.delete_flow_and_data's, which every start shares), so a
-- start in flight commits first and its run is then visible to the check. SECURITY DEFINER as PostgreSQL's own key
-- checks are: the check reads tables the deleting role need not be able to read; a trigger function cannot be called
-- in any other way.
create or replace function pgflow._guard_definition_keys()
returns trigger
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow        text;
  v_step        text;
  v_referencing text;
begin
  if tg_level = 'STATEMENT' then
    -- After a truncate of flows or steps: the runtime rows must have gone in the same statement.
    if tg_table_name = 'flows' and exists (select 1 from pgflow.runs) then
      v_referencing := 'runs';
    elsif tg_table_name = 'steps' and exists (select 1 from pgflow.step_states) then
      v_referencing := 'step_states';
    else
      return null;
    end if;
    raise exception using
      errcode = '0A000',
      message = 'cannot truncate a table referenced in a foreign key constraint',
      detail = format('Table "%s" references "%s".', v_referencing, tg_table_name),
      hint = format('Truncate table "%s" at the same time.', v_referencing);
  end if;

  v_flow := old.flow_slug;
  if tg_table_name = 'steps' then
    v_step := old.step_slug;
    if tg_op = 'UPDATE' and new.flow_slug = old.flow_slug and new.step_slug = old.step_slug then
      return new;
    end if;
  elsif tg_op = 'UPDATE' and new.flow_slug = old.flow_slug then
    return new;
  end if;

  perform pg_advisory_xact_lock(1, hashtext(lower(v_flow)));

  if v_step is null and exists (select 1 from pgflow.runs as r where r.flow_slug = v_flow) then
    raise exception using
      errcode = '23503',
      message = 'update or delete on table "flows" violates foreign key constraint "runs_flow_slug_fkey" on table "runs"',
      detail = format('Key (flow_slug)=(%s) is still referenced from table "runs".', v_flow),
      schema = 'pgflow',
      table = 'runs',
      constraint = 'runs_flow_slug_fkey';
  elsif v_step is not null and exists (
    select 1 from pgflow.step_states as ss where ss.flow_slug = v_flow and ss.step_slug = v_step
  ) then
    raise exception using
      errcode = '23503',
      message = 'update or delete on table "steps" violates foreign key constraint "step_states_flow_slug_step_slug_fkey" on table "step_states"',
      detail = format('Key (flow_slug, step_slug)=(%s, %s) is still referenced from table "step_states".', v_flow, v_step),
      schema = 'pgflow',
      table = 'step_states',
      constraint = 'step_states_flow_slug_step_slug_fkey';
  end if;

  -- Under REPEATABLE READ or SERIALIZABLE the check above read this transaction's snapshot, taken before the lock:
  -- a start that committed in between is not in it (PostgreSQL's own keys re-check with a newer snapshot, which a
  -- function cannot). Refuse rather than leave runs of a flow that no longer exists.
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception using
      errcode = '25000',
      message = format('Cannot delete or rename %s of flow "%s" in a %s transaction',
                       case when v_step is null then 'the definition' else format('step "%s"', v_step) end,
                       v_flow, upper(current_setting('transaction_isolation'))),
      detail = 'Runs started after this transaction''s snapshot would not be seen by the check that no run uses it.',
      hint = 'Run it (or pgflow.delete_flow_and_data) in a READ COMMITTED transaction.';
  end if;

  if tg_op = 'DELETE' then
    return old;
  end if;
  return new;
end;
$$;

create or replace trigger guard_definition_keys
  before delete or update of flow_slug on pgflow.flows
  for each row execute function pgflow._guard_definition_keys();
create or replace trigger guard_definition_keys_truncate
  after truncate on pgflow.flows
  for each statement execute function pgflow._guard_definition_keys();
create or replace trigger guard_definition_keys
  before delete or update of flow_slug, step_slug on pgflow.steps
  for each row execute function pgflow._guard_definition_keys();
create or replace trigger guard_definition_keys_truncate
  after truncate on pgflow.steps
  for each statement execute function pgflow._guard_definition_keys();

comment on function pgflow._guard_definition_keys() is $doc$
pgflow._guard_definition_keys() guarantees (v0.20.0; a trigger function of pgflow.flows and pgflow.steps): no run
is left naming a flow, and no step state naming a step, that no longer exists, as the foreign keys
runs_flow_slug_fkey and step_states_flow_slug_step_slug_fkey guaranteed in pgflow:
  * deleting a flow row, or changing its flow_slug, while runs of the flow exist raises 23503 with the message,
    detail and constraint name runs_flow_slug_fkey's violation had; a step row, while step states of the step
    exist, the same with step_states_flow_slug_step_slug_fkey. An update that keeps the key changes nothing here;
  * first it takes the flow's advisory lock exclusively (the lock pgflow.delete_flow_and_data takes and every
    start_flow/start_flows shares), so a start in flight finishes before the check and is seen by it;
  * in a REPEATABLE READ or SERIALIZABLE transaction such a delete or rename is refused (25000) whatever the
    tables hold, because the check cannot see runs committed after the snapshot;
  * a TRUNCATE of flows (steps) fails with 0A000, as for a foreign key, when runs (step_states) still has rows at
    the end of the statement, i.e. when they were not truncated with it;
  * nothing else: the insert side of the keys is start_flow's and start_flows' (an unknown flow raises
    runs_flow_slug_fkey's error; the flow's row is locked FOR KEY SHARE once per call).
$doc$;
