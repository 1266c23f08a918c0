-- pgflow._lock_flow_for_start: the insert side of runs_flow_slug_fkey, which the schema leaves out (see
-- sql/core/0023_table_runs.sql), done once per start call instead of once per inserted row.
create or replace function pgflow._lock_flow_for_start(flow_slug text)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  perform 1 from pgflow.flows as f where f.flow_slug = _lock_flow_for_start.flow_slug for key share;
  if not found and _lock_flow_for_start.flow_slug is not null then
    raise exception using
      errcode = '23503',
      message = 'insert or update on table "runs" violates foreign key constraint "runs_flow_slug_fkey"',
      detail = format('Key (flow_slug)=(%s) is not present in table "flows".', _lock_flow_for_start.flow_slug),
      schema = 'pgflow',
      table = 'runs',
      constraint = 'runs_flow_slug_fkey';
  end if;
end;
$$;

comment on function pgflow._lock_flow_for_start(flow_slug text) is $doc$
pgflow._lock_flow_for_start(flow_slug) guarantees (v0.20.0; called by start_flow and start_flows after they take
the shared flow lock, before they write): the flow's row is locked FOR KEY SHARE until the end of the transaction,
so a concurrent delete of it waits (pgflow._guard_definition_keys then sees the new runs), and under REPEATABLE
READ a flow deleted after the snapshot makes the call fail to serialise (40001). An unknown flow raises what
runs_flow_slug_fkey raised: 23503, 'insert or update on table "runs" violates foreign key constraint
"runs_flow_slug_fkey"', detail 'Key (flow_slug)=(<slug>) is not present in table "flows".', schema pgflow, table
runs, constraint runs_flow_slug_fkey. A NULL slug does nothing (the insert's not-null violation reports it).
$doc$;
