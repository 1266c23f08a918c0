-- Optional role model for pgflow-go, NOT installed by migrations. Run it by hand as a superuser, in the database
-- that holds the pgflow schema, after installing or upgrading the schema (`pgflow snippet print roles | psql`,
-- or schema.OptionalSQL("roles")). It is idempotent: run it again after every migration, so new functions and
-- tables get their privileges. It works with both ways of providing PGMQ: the bundled SQL-only layer and the real
-- pgmq extension.
--
-- Three group roles (NOLOGIN); grant them to your login roles, e.g. `grant pgflow_worker to orders_worker`:
--
--   pgflow_owner  - owns the schemas pgflow and pgmq and everything in them that is not part of an extension.
--                   Run migrations and flow compilation (migration files from Flow.CompileSQL, or a deploy step
--                   that runs pgflow.ensure_flow_compiled) as this role (`set role pgflow_owner`), so new queues
--                   are owned by it and reach the worker role through the default privileges below (with the
--                   real pgmq extension, see below who may create queues).
--                   SECURITY DEFINER functions run with its rights: starting a run (start_flow_with_states) sends
--                   into the flow's queue tables as pgflow_owner, whoever created them.
--   pgflow_worker - what a worker needs, nothing more: read definitions, poll, claim, complete, fail, heartbeat,
--                   register, recover stalled tasks. It reads flows, steps and deps but cannot change them: a
--                   worker whose flow is missing or differs from the database fails at startup with "permission
--                   denied" instead of compiling it, and it cannot delete flows or data, nor create or drop
--                   anything.
--   pgflow_client - start runs and read runs with their step states: only the SECURITY DEFINER functions
--                   pgflow.start_flow_with_states and pgflow.get_run_with_states (what the Go client calls), and
--                   LISTEN, which needs no privilege. It can read no table but pgflow.schedules (and pause and
--                   resume schedules), cannot claim, complete or fail tasks, and has no access to PGMQ.
--
-- With the real pgmq extension, pgmq.create adds every new queue table to the extension (ALTER EXTENSION pgmq ADD
-- TABLE), which only the extension's owner (or a superuser) may do, and the tables are owned by the role that ran
-- pgmq.create. So a queue can only be created (a new flow compiled) by a role that owns the extension:
--   * simplest: let pgflow_owner own it - create the extension as pgflow_owner before the first migration
--     (`grant create on database … to pgflow_owner; set role pgflow_owner; create extension pgmq;`); then everything
--     works as with the bundled layer;
--   * where the extension already exists and belongs to another role (Supabase: postgres), compile flows as that
--     role. This file grants pgflow_owner and pgflow_worker their privileges on the queue tables that exist, and
--     default privileges make the same grants on the tables that the extension's owner creates later. Run this
--     file again after a superuser other than the extension's owner compiled a flow.
-- pgflow_owner cannot create queues (compile new flows) on an extension it does not own: pgmq.create fails with
-- "must be owner of extension pgmq".
--
-- Guarantees after a successful run:
--   * the three roles exist (existing roles are kept as they are: attributes and memberships are not changed);
--   * every table, sequence, view, composite type and function of the schemas pgflow and pgmq that is not a member
--     of an extension is owned by pgflow_owner, and so are the two schemas when they are not extension members
--     (the pgmq extension's objects, including the queue tables pgmq.create adds to it, keep their owner);
--   * PUBLIC can execute no pgflow function, and functions pgflow_owner creates later are not executable by PUBLIC;
--   * pgflow_owner: USAGE on schema pgmq; on every PGMQ table and sequence it does not own, the privileges that
--     pgflow_worker has on it (below);
--   * pgflow_worker: USAGE on both schemas; SELECT on pgflow.flows, steps, deps, and UPDATE of
--     flows.message_retention (v0.20.0: a worker applies its flows' DeleteTaskMessages); SELECT, INSERT, UPDATE on runs,
--     step_states, step_tasks, workers, worker_functions, schedules (v0.20.0); SELECT, INSERT, UPDATE, DELETE on every PGMQ queue and
--     archive table, SELECT on pgmq.meta, USAGE/SELECT/UPDATE on PGMQ sequences; EXECUTE on every pgflow function
--     except the ones that change definitions (create_flow, add_step, _create_flow_from_shape,
--     delete_flow_and_data) and the optional prune_data_older_than, and on every pgmq function;
--   * queues created later by pgflow_owner, or by the pgmq extension's owner, give pgflow_worker (and
--     pgflow_owner) the same privileges on their tables and sequences through default privileges;
--   * pgflow_client: USAGE on schema pgflow and EXECUTE on start_flow_with_states, get_run_with_states and
--     schema_version (v0.20.0), plus (v0.20.0) SELECT on pgflow.schedules and EXECUTE on pause_schedule and
--     resume_schedule (SECURITY DEFINER), only. It cannot cancel or retry runs: pgflow.cancel_run and pgflow.retry_run
--     (v0.20.0) are SECURITY INVOKER and change runs, steps, tasks and queues, so they need what pgflow_worker has
--     (which can execute them) or pgflow_owner; grant one of those to the operator role of `pgflow runs cancel`
--     / `retry` or the dashboard's actions;
--   * when realtime.send(jsonb, text, text, boolean) exists (Supabase), pgflow_owner and pgflow_worker may call it.
-- Everything happens in one transaction when the caller runs the file in one (psql --single-transaction).

do $roles$
declare
  v_role text;
begin
  foreach v_role in array array['pgflow_owner', 'pgflow_worker', 'pgflow_client'] loop
    if not exists (select 1 from pg_catalog.pg_roles as r where r.rolname = v_role) then
      begin
        execute format('create role %I nologin', v_role);
      exception when duplicate_object or unique_violation then
        null; -- created concurrently by another session: fine
      end;
    end if;
  end loop;
end;
$roles$;

-- Ownership: the owner role owns both schemas and their non-extension objects.
do $owner$
declare
  v_obj record;
begin
  for v_obj in
    select n.nspname
      from pg_catalog.pg_namespace as n
     where n.nspname in ('pgflow', 'pgmq')
       and not exists (select 1 from pg_catalog.pg_depend as d
                        where d.classid = 'pg_catalog.pg_namespace'::regclass and d.objid = n.oid and d.deptype = 'e')
  loop
    execute format('alter schema %I owner to pgflow_owner', v_obj.nspname);
  end loop;

  for v_obj in
    select c.oid::regclass::text as name, c.relkind
      from pg_catalog.pg_class as c
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
     where n.nspname in ('pgflow', 'pgmq')
       and c.relkind in ('r', 'p', 'v', 'm', 'S', 'c')
       and not exists (select 1 from pg_catalog.pg_depend as d
                        where d.classid = 'pg_catalog.pg_class'::regclass and d.objid = c.oid and d.deptype = 'e')
       -- sequences owned by a column (serial, identity) follow their table
       and not (c.relkind = 'S' and exists (select 1 from pg_catalog.pg_depend as d
                                             where d.classid = 'pg_catalog.pg_class'::regclass and d.objid = c.oid
                                               and d.deptype in ('a', 'i')))
     order by c.relkind desc, 1
  loop
    execute format('alter %s %s owner to pgflow_owner',
                   case v_obj.relkind when 'S' then 'sequence' when 'v' then 'view'
                                      when 'm' then 'materialized view' when 'c' then 'type' else 'table' end,
                   v_obj.name);
  end loop;

  for v_obj in
    select p.oid::regprocedure::text as name
      from pg_catalog.pg_proc as p
      join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
     where n.nspname in ('pgflow', 'pgmq')
       and not exists (select 1 from pg_catalog.pg_depend as d
                        where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
     order by 1
  loop
    execute format('alter routine %s owner to pgflow_owner', v_obj.name);
  end loop;
end;
$owner$;

-- Nobody but the owner may use the schemas unless granted below.
revoke all on schema pgflow from public;
revoke execute on all functions in schema pgflow from public;
alter default privileges for role pgflow_owner in schema pgflow revoke execute on functions from public;

-- Worker.
grant usage on schema pgflow, pgmq to pgflow_worker;
grant select on pgflow.flows, pgflow.steps, pgflow.deps to pgflow_worker;
-- A worker applies its code's message retention to the flows it serves (ensure_flow_compiled, v0.20.0): that one
-- column, nothing else of a definition.
grant update (message_retention) on pgflow.flows to pgflow_worker;
grant select, insert, update on pgflow.runs, pgflow.step_states, pgflow.step_tasks, pgflow.workers,
  pgflow.worker_functions to pgflow_worker;
-- Schedules (v0.20.0): workers write their schedules at startup and fire due ticks.
do $worker_schedules$
begin
  if pg_catalog.to_regclass('pgflow.schedules') is not null then
    grant select, insert, update on pgflow.schedules to pgflow_worker;
  end if;
end;
$worker_schedules$;
grant execute on all functions in schema pgflow to pgflow_worker;
do $worker$
declare
  v_fn record;
begin
  for v_fn in
    select p.oid::regprocedure::text as name
      from pg_catalog.pg_proc as p
      join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
     where n.nspname = 'pgflow'
       and p.proname in ('create_flow', 'add_step', '_create_flow_from_shape', 'delete_flow_and_data',
                         'prune_data_older_than')
  loop
    execute format('revoke execute on function %s from pgflow_worker', v_fn.name);
  end loop;
end;
$worker$;
grant select, insert, update, delete on all tables in schema pgmq to pgflow_worker;
revoke insert, update, delete on pgmq.meta from pgflow_worker;
grant usage, select, update on all sequences in schema pgmq to pgflow_worker;
grant execute on all functions in schema pgmq to pgflow_worker;
alter default privileges for role pgflow_owner in schema pgmq
  grant select, insert, update, delete on tables to pgflow_worker;
alter default privileges for role pgflow_owner in schema pgmq
  grant usage, select, update on sequences to pgflow_worker;

-- Owner on PGMQ objects it does not own: with the real extension the queue tables belong to whoever ran
-- pgmq.create (the extension's owner or a superuser), yet the SECURITY DEFINER functions send, read, archive and
-- change the visibility of their messages as pgflow_owner.
do $owner_pgmq$
declare
  v_obj record;
  v_ext_owner text;
begin
  if not pg_catalog.has_schema_privilege('pgflow_owner', 'pgmq', 'usage') then
    grant usage on schema pgmq to pgflow_owner;
  end if;

  for v_obj in
    select c.oid::regclass::text as name, c.relkind, c.relname
      from pg_catalog.pg_class as c
      join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
     where n.nspname = 'pgmq'
       and c.relkind in ('r', 'p', 'S')
       and c.relowner <> 'pgflow_owner'::pg_catalog.regrole
     order by 1
  loop
    if v_obj.relkind = 'S' then
      execute format('grant usage, select, update on sequence %s to pgflow_owner', v_obj.name);
    elsif v_obj.relname = 'meta' then
      execute format('grant select on table %s to pgflow_owner', v_obj.name);
    else
      execute format('grant select, insert, update, delete on table %s to pgflow_owner', v_obj.name);
    end if;
  end loop;

  -- Queues the extension's owner creates later reach both roles without another run of this file.
  select pg_catalog.pg_get_userbyid(e.extowner) into v_ext_owner
    from pg_catalog.pg_extension as e
   where e.extname = 'pgmq';
  if v_ext_owner is not null and v_ext_owner <> 'pgflow_owner' then
    execute format('alter default privileges for role %I in schema pgmq
                      grant select, insert, update, delete on tables to pgflow_owner, pgflow_worker', v_ext_owner);
    execute format('alter default privileges for role %I in schema pgmq
                      grant usage, select, update on sequences to pgflow_owner, pgflow_worker', v_ext_owner);
  end if;
end;
$owner_pgmq$;

-- Supabase Realtime: pgflow._emit_event calls realtime.send(jsonb, text, text, boolean) when it exists, as the
-- role running the orchestration (the worker, or the owner inside SECURITY DEFINER functions).
do $realtime$
begin
  if pg_catalog.to_regprocedure('realtime.send(jsonb,text,text,boolean)') is not null then
    grant usage on schema realtime to pgflow_owner, pgflow_worker;
    grant execute on function realtime.send(jsonb, text, text, boolean) to pgflow_owner, pgflow_worker;
  end if;
end;
$realtime$;

-- Client.
grant usage on schema pgflow to pgflow_client;
grant execute on function pgflow.start_flow_with_states(text, jsonb, uuid), pgflow.get_run_with_states(uuid)
  to pgflow_client;
-- Several runs in one call (v0.20.0): the Go client coalesces concurrent starts of one flow into it.
do $client_start_flows$
begin
  if pg_catalog.to_regprocedure('pgflow.start_flows_with_states(text,jsonb[])') is not null then
    grant execute on function pgflow.start_flows_with_states(text, jsonb[]) to pgflow_client;
  end if;
end;
$client_start_flows$;
-- The Go client checks the schema version once (pgflow.schema_version(), v0.20.0): a constant, nothing to read.
do $client_version$
begin
  if pg_catalog.to_regprocedure('pgflow.schema_version()') is not null then
    grant execute on function pgflow.schema_version() to pgflow_client;
  end if;
end;
$client_version$;
-- Schedules (v0.20.0): list them (a plain read of pgflow.schedules: names, crons and the fixed inputs), pause and
-- resume them (SECURITY DEFINER functions that change nothing but the named schedule's paused state).
do $client_schedules$
begin
  if pg_catalog.to_regclass('pgflow.schedules') is not null then
    grant select on pgflow.schedules to pgflow_client;
    grant execute on function pgflow.pause_schedule(text), pgflow.resume_schedule(text) to pgflow_client;
  end if;
end;
$client_schedules$;
