-- pgflow-go schema v0.20.0: changes since v0.19.0 (trust at the edges).
set local check_function_bodies = off;

-- Attempt fencing changes three signatures (a trailing attempt argument with a default, so pgflow's four-argument
-- calls keep working), and per-step queues three more (trailing queue_mode and message_retention arguments with
-- defaults). The old functions are dropped first so calls are not ambiguous; roles that could execute
-- them keep that right on the new ones (granted again at the end of this file).
create temporary table pgflow_v020_grants on commit drop as
  select a.grantee::regrole::text as grantee, p.proname::text as proname
    from pg_catalog.pg_proc as p
    cross join lateral pg_catalog.aclexplode(p.proacl) as a
   where p.oid in (pg_catalog.to_regprocedure('pgflow.complete_task(uuid,text,integer,jsonb)'),
                   pg_catalog.to_regprocedure('pgflow.fail_task(uuid,text,integer,text)'),
                   pg_catalog.to_regprocedure('pgflow.complete_tasks(uuid[],text[],integer[],jsonb[])'),
                   pg_catalog.to_regprocedure('pgflow.create_flow(text,integer,integer,integer)'),
                   pg_catalog.to_regprocedure('pgflow.ensure_flow_compiled(text,jsonb,boolean)'),
                   pg_catalog.to_regprocedure('pgflow._create_flow_from_shape(text,jsonb)'))
     and a.privilege_type = 'EXECUTE'
     and a.grantee <> 0
     and a.grantee <> p.proowner;

-- New functions that go with an existing one are granted to the roles that may execute it (its owner and PUBLIC
-- aside), so an upgrade keeps every role able to do what it did (used below; dropped at the end of this file).
create function pg_temp.pgflow_v020_grant_with(existing text, new_functions text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $grant_with$
declare
  v_grantee text;
begin
  for v_grantee in
    select distinct a.grantee::regrole::text
      from pg_catalog.pg_proc as p
      cross join lateral pg_catalog.aclexplode(p.proacl) as a
     where p.oid = pg_catalog.to_regprocedure(existing)
       and a.privilege_type = 'EXECUTE'
       and a.grantee <> 0
       and a.grantee <> p.proowner
  loop
    execute format('grant execute on function %s to %s', new_functions, v_grantee);
  end loop;
end;
$grant_with$;

drop function pgflow.complete_task(uuid, text, integer, jsonb);
drop function pgflow.fail_task(uuid, text, integer, text);
drop function pgflow.complete_tasks(uuid[], text[], integer[], jsonb[]);
drop function pgflow.create_flow(text, integer, integer, integer);
drop function pgflow.ensure_flow_compiled(text, jsonb, boolean);
drop function pgflow._create_flow_from_shape(text, jsonb);

-- Per-step queues (issue 15): a flow's queue mode is deployment metadata. Existing flows keep one queue ('flow');
-- a constant default adds the column without rewriting the table.
alter table pgflow.flows
  add column queue_mode text not null default 'flow',
  add constraint queue_mode_is_valid check (queue_mode in ('flow', 'step'));

comment on column pgflow.flows.queue_mode is
  'Where the flow''s tasks are sent: ''flow'' = one queue for the whole flow (its default queue), ''step'' = one private queue per step.';

-- Message retention (issue 16): a flow may delete a task's message when a worker claims the task instead of
-- archiving it when the task finishes. Existing flows keep archiving.
alter table pgflow.flows
  add column message_retention text not null default 'archive',
  add constraint message_retention_is_valid check (message_retention in ('archive', 'delete'));

comment on column pgflow.flows.message_retention is
  'What happens to a task''s PGMQ message: ''archive'' = it stays in the queue while the task runs and is archived when the task finishes (pgmq.archive); ''delete'' = it is deleted when a worker claims the task (two rows fewer per task, no copy in the archive). Safe to change at any time.';

-- Run control (issue 14): runs can be cancelled and retried; a run that fails or is cancelled skips its unfinished
-- steps (skip_reason 'run_failed' / 'run_cancelled') and cancels its unfinished tasks (new task status
-- 'cancelled'). Tasks record when a retry becomes visible (retry_at) and the attempts spent before retry_run gave
-- them fresh ones (attempts_before_retry). New columns have no default or a constant one: no table rewrite.
alter table pgflow.runs
  add column cancelled_at timestamptz,
  add column cancel_reason text,
  add column retry_of uuid,
  drop constraint status_is_valid,
  add constraint status_is_valid check (status in ('started', 'failed', 'completed', 'cancelled')),
  add constraint cancelled_at_is_after_started_at check (cancelled_at is null or cancelled_at >= started_at),
  add constraint cancelled_at_only_when_cancelled check (cancelled_at is null or status = 'cancelled');

alter table pgflow.step_tasks
  add column retry_at timestamptz,
  add column attempts_before_retry int not null default 0,
  drop constraint valid_status,
  add constraint valid_status check (status in ('queued', 'started', 'completed', 'failed', 'cancelled')),
  add constraint attempts_before_retry_in_range
    check (attempts_before_retry >= 0 and attempts_before_retry <= attempts_count);

comment on column pgflow.step_tasks.retry_at is
  'When the task was last queued for a retry (fail_task): the time its next attempt becomes visible. NULL otherwise.';
comment on column pgflow.step_tasks.attempts_before_retry is
  'attempts_count when pgflow.retry_run last gave the task fresh attempts (0 if never): attempt numbers keep counting, so a report of an attempt from before the retry stays fenced, while the retry budget counts attempts_count - attempts_before_retry.';

-- Listing runs newest first (keyset on started_at, run_id) by flow, by status or all: pgflow's two indexes keep
-- their names and leading column and gain (started_at, run_id); one index for listing all runs (see
-- sql/core/0023_table_runs.sql for the write cost).
drop index pgflow.idx_runs_flow_slug;
drop index pgflow.idx_runs_status;
create index idx_runs_flow_slug on pgflow.runs (flow_slug, started_at, run_id);
create index idx_runs_status on pgflow.runs (status, started_at, run_id);
create index idx_runs_started_at on pgflow.runs (started_at, run_id);

-- Three step_tasks indexes fewer (see sql/core/0026_table_step_tasks.sql): every task paid two index entries when
-- queued and one when completed for indexes whose lookups the primary key and the queue identity key serve.
drop index pgflow.idx_step_tasks_queued;
drop index pgflow.idx_step_tasks_queued_msg;
drop index pgflow.idx_step_tasks_completed;

-- And the other three (see sql/core/0026_table_step_tasks.sql): with no index on status, started_at or
-- last_worker_id, a task's claim and completion are heap-only-tuple updates where the page has room, which the
-- fillfactor keeps for the versions written from now on (existing pages stay as full as they are).
drop index pgflow.idx_step_tasks_failed;
drop index pgflow.idx_step_tasks_started;
drop index pgflow.idx_step_tasks_last_worker;
alter table pgflow.step_tasks set (fillfactor = 70);

-- The same for step states (see sql/core/0024_table_step_states.sql): the indexes that name status or
-- remaining_deps go, and their lookups by run use the primary key's range of the run.
drop index pgflow.idx_step_states_ready;
drop index pgflow.idx_step_states_failed;
drop index pgflow.idx_step_states_skipped;
alter table pgflow.step_states set (fillfactor = 70);

-- Two foreign keys fewer, both implied by others (see sql/core/0024_table_step_states.sql and
-- 0026_table_step_tasks.sql): a step state's flow is its step's flow, and a task's run is its step state's run.
-- Each was a query and a row lock for every row inserted.
alter table pgflow.step_states drop constraint step_states_flow_slug_fkey;
alter table pgflow.step_tasks drop constraint step_tasks_run_id_fkey;

-- Three foreign keys to the definitions fewer (see sql/core/0023_table_runs.sql): each checked every inserted row
-- with a query and a row lock on the flow or step that all concurrent starts shared. The start locks the flow once
-- per call and refuses an unknown flow with the key's error; the trigger pgflow._guard_definition_keys (created
-- with its function below) keeps flows and steps that runs use from being deleted, renamed or truncated away.
alter table pgflow.runs drop constraint runs_flow_slug_fkey;
alter table pgflow.step_states drop constraint step_states_flow_slug_step_slug_fkey;
alter table pgflow.step_tasks drop constraint step_tasks_flow_slug_fkey;

-- The queue-name rule with its length tested apart from the pattern (see sql/core/0026_table_step_tasks.sql): the
-- same set of names, about ten times cheaper to check (3 us with the bounded repetition), and step_tasks checks it
-- on every write of a task.
alter table pgflow.step_tasks
  drop constraint step_tasks_queue_name_is_valid,
  add constraint step_tasks_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47);
alter table pgflow.steps
  drop constraint steps_queue_name_is_valid,
  add constraint steps_queue_name_is_valid check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47);

-- >>> Targeted wake, listening workers only (issue 16) - one block: the workers table, heartbeat_worker.
-- pgflow._wake_queue looks up one alive worker of a queue per wake, among those whose heartbeat says they listen on
-- their own channel (listens_at; a constant-free nullable column: no table rewrite, every existing row counts as
-- not listening until its next heartbeat says otherwise). Rows of stopped, deprecated and non-listening workers are
-- never chosen, so only the others are indexed, by queue and heartbeat.
alter table pgflow.workers
  add column listens_at timestamptz,
  add column listener_pid integer,
  add constraint workers_listener_pid_with_listens_at check ((listens_at is null) = (listener_pid is null));

comment on column pgflow.workers.listens_at is
  'Since when the worker has listened on its own channel pgflow:w:<worker_id> from the session listener_pid, as its heartbeats report (pgflow.heartbeat_worker(worker_id, listener_pid => pid)); NULL = it does not listen there (or does not say: pgflow''s TypeScript worker, a PollOnly or older Go worker, a Go worker whose LISTEN connection is down). Only such workers are woken alone by pgflow._wake_queue. A time rather than a boolean: it costs the same, stays NULL for every row written by pgflow''s own functions, and shows operators when a worker''s listener last (re)connected.';

comment on column pgflow.workers.listener_pid is
  'The server process id (pg_backend_pid()) of the session in which the worker listens on its own channel, as its last heartbeat reported; NULL exactly when listens_at is NULL. pgflow._wake_queue wakes the worker alone only while that process exists (pg_stat_activity), so a worker that died without stopping (killed, crashed) is not chosen for the up to 30 s its last heartbeat still counts: its connection ends with it.';

create index idx_workers_listening on pgflow.workers (queue_name, last_heartbeat_at)
  where stopped_at is null and deprecated_at is null and listens_at is not null;

-- heartbeat_worker gains an optional second argument (listener_pid, default NULL): the new form is created next to
-- pgflow's one-argument form, receives the EXECUTE grants of the old one (PUBLIC's included, or not), and the old
-- one is dropped (a call with one argument would otherwise be ambiguous). register_worker clears listens_at and
-- listener_pid (a new life does not listen yet).
-- generated from sql/core: 0100_function_heartbeat_worker.sql
create or replace function pgflow.heartbeat_worker(worker_id uuid, listener_pid integer default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_deprecated boolean;
  v_queue text;
begin
  if heartbeat_worker.listener_pid <= 0 then
    raise exception using
      errcode = '22023',
      message = format('listener_pid %s is not a server process id', heartbeat_worker.listener_pid),
      hint = 'Pass pg_backend_pid() of the session that listens on the worker''s channel, or NULL when none does.';
  end if;

  -- Every heartbeat restates where the worker listens on its own channel, so a worker that lost its LISTEN
  -- connection stops being woken alone at its next heartbeat even if it could not say so at once, and pgflow's
  -- one-argument callers (which know nothing of that channel) always count as not listening. listens_at starts
  -- again with a new listening session: it tells since when the current one has listened.
  update pgflow.workers as w
  set last_heartbeat_at = c.ts,
      listens_at = case
                     when heartbeat_worker.listener_pid is null then null
                     when w.listener_pid = heartbeat_worker.listener_pid then w.listens_at
                     else c.ts
                   end,
      listener_pid = heartbeat_worker.listener_pid
  from (select clock_timestamp() as ts) as c
  where w.worker_id = heartbeat_worker.worker_id
  returning w.deprecated_at is not null, w.queue_name into v_deprecated, v_queue;

  if not found then
    raise exception using
      errcode = 'P0002',
      message = format('Worker %s is not registered', heartbeat_worker.worker_id),
      hint = 'Call pgflow.register_worker(worker_id, queue_name, function_name) first.';
  end if;

  -- A worker killed without stopping (SIGKILL, a crash, an OOM kill) keeps a recent heartbeat for up to 30 s, and
  -- pgflow._wake_queue would keep choosing it; its wakes would be lost. Its LISTEN session ended with it, so the
  -- heartbeats of the queue's other workers forget listening sessions that no longer exist: within one heartbeat
  -- interval of any survivor, the dead worker is no longer woken alone. Checked here, every few seconds per
  -- worker, and not in _wake_queue: the first pg_stat_get_activity call of a transaction copies every backend's
  -- status (100-280 us). Under READ COMMITTED the update re-checks a row that a concurrent heartbeat changed, so a
  -- worker that has just reported its new session keeps it.
  update pgflow.workers as o
     set listens_at = null,
         listener_pid = null
   where o.queue_name = v_queue
     and o.worker_id <> heartbeat_worker.worker_id
     and o.listener_pid is not null
     and not exists (select from pg_catalog.pg_stat_get_activity(o.listener_pid) as a);

  return v_deprecated;
end;
$$;

comment on function pgflow.heartbeat_worker(worker_id uuid, listener_pid integer) is $doc$
pgflow.heartbeat_worker(worker_id, listener_pid => NULL) guarantees: records that the worker is alive
(last_heartbeat_at = clock_timestamp()) and returns true when the worker has been deprecated and should finish its
in-flight work and exit, false otherwise. An unregistered worker_id raises (SQLSTATE P0002) naming the id, so the
worker can register again instead of heartbeating into nothing.
Since v0.20.0 it also records whether, and in which session, the worker listens on its own channel
'pgflow:w:<worker_id>' now (see pgflow._wake_queue): listener_pid is the server process id (pg_backend_pid()) of
the session whose LISTEN on that channel is in effect, NULL when there is none. It is stored in listener_pid;
listens_at keeps its value while the pid stays the same and is set to the same clock_timestamp() otherwise (since
when the current listening session has listened, as the heartbeats report); NULL, and pgflow's one-argument call,
set both to NULL. A listener_pid of 0 or less raises 22023 naming the value and changes nothing.
It also forgets the listening sessions of the same queue's other workers that no longer exist (listener_pid not
in pg_stat_activity: the worker was killed or lost its connection without saying so): their listens_at and
listener_pid become NULL, so pgflow._wake_queue stops choosing them. Needs EXECUTE on
pg_catalog.pg_stat_get_activity (PUBLIC has it by default), which shows every session's pid to every role. A pid
reused by a new session keeps a dead worker counted as listening until its heartbeat is 30 s old. The same id and
row as before v0.20.0; the second argument is optional, so pgflow's heartbeat_worker(worker_id) calls keep working
unchanged.
$doc$;
-- end generated

do $heartbeat_grants$
begin
  perform pg_temp.pgflow_v020_grant_with('pgflow.heartbeat_worker(uuid)', 'pgflow.heartbeat_worker(uuid, integer)');
  -- PUBLIC keeps what it had too: where an operator (or roles.sql) revoked it, the new function gets no more.
  if not exists (
    select 1
      from pg_catalog.pg_proc as p
      cross join lateral pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) as a
     where p.oid = pg_catalog.to_regprocedure('pgflow.heartbeat_worker(uuid)')
       and a.privilege_type = 'EXECUTE'
       and a.grantee = 0
  ) then
    revoke execute on function pgflow.heartbeat_worker(uuid, integer) from public;
  end if;
end;
$heartbeat_grants$;

drop function pgflow.heartbeat_worker(uuid);

-- generated from sql/core: 0100_function_register_worker.sql
create or replace function pgflow.register_worker(worker_id uuid, queue_name text, function_name text)
returns pgflow.workers
language sql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  insert into pgflow.workers as w (worker_id, queue_name, function_name, started_at, last_heartbeat_at)
  values (
    register_worker.worker_id, register_worker.queue_name, register_worker.function_name,
    clock_timestamp(), clock_timestamp()
  )
  on conflict on constraint workers_pkey do update set
    queue_name = excluded.queue_name,
    function_name = excluded.function_name,
    started_at = excluded.started_at,
    last_heartbeat_at = excluded.last_heartbeat_at,
    deprecated_at = null,
    stopped_at = null,
    listens_at = null,
    listener_pid = null
  returning w.*;
$$;

comment on function pgflow.register_worker(worker_id uuid, queue_name text, function_name text) is $doc$
pgflow.register_worker(worker_id, queue_name, function_name) guarantees: a workers row for worker_id exists
afterwards and describes a live worker: queue_name and function_name as given, started_at and
last_heartbeat_at = clock_timestamp(), deprecated_at and stopped_at NULL (registering again starts a new life
of the same id), and listens_at and listener_pid NULL (since v0.20.0: a new life does not listen on its own channel until
its heartbeat says so, pgflow.heartbeat_worker(worker_id, listener_pid => pid)). Returns the row. Must run before the
worker claims tasks (step_tasks.last_worker_id references it).
$doc$;
-- end generated
-- <<< Targeted wake, listening workers only (issue 16).

-- Runs that failed before v0.20.0 look finished too: their unfinished steps are skipped (run_failed), their
-- unfinished tasks cancelled (their messages were archived when the run failed), and remaining_steps counts what
-- is neither completed nor skipped. No event is emitted for this.
update pgflow.step_states as ss
   set status = 'skipped',
       skip_reason = 'run_failed',
       skipped_at = greatest(now(), ss.created_at),
       remaining_tasks = null
  from pgflow.runs as r
 where r.status = 'failed'
   and ss.run_id = r.run_id
   and ss.status in ('created', 'started');

update pgflow.step_tasks as t
   set status = 'cancelled'
  from pgflow.runs as r
 where r.status = 'failed'
   and t.run_id = r.run_id
   and t.status in ('queued', 'started');

update pgflow.runs as r
   set remaining_steps = (select count(*)::integer
                            from pgflow.step_states as ss
                           where ss.run_id = r.run_id
                             and ss.status not in ('completed', 'skipped'))
 where r.status = 'failed';

-- Schedules (issue 15): cron schedules that start runs; the table as in sql/core/0028_table_schedules.sql.
-- pgflow.schedules (v0.20.0, pgflow-go only): flows started on a cron schedule with a fixed input. Workers write
-- the definition columns at startup (pgflow.upsert_schedule); operators own paused (pause_schedule /
-- resume_schedule). Whichever worker holds the scheduler's advisory lock fires due ticks through
-- pgflow.fire_schedule_tick, which refuses every tick at or before last_tick, so each tick starts at most one run.
-- The cron expression is parsed by the workers (Go), not by SQL: the database stores it as text.
-- Deleting a flow (pgflow.delete_flow_and_data, also when a changed flow is recompiled) deletes its schedules;
-- workers write the schedules of their code again at startup, after compiling their flows.
create table pgflow.schedules (
  schedule_name text        not null,
  flow_slug     text        not null,
  cron          text        not null,
  time_zone     text        not null default 'UTC',
  input         jsonb       not null,
  missed        text        not null default 'skip',
  max_catch_up  int         not null default 10,
  paused        boolean     not null default false,
  last_tick     timestamptz not null,
  last_run_id   uuid,
  next_tick     timestamptz,
  created_at    timestamptz not null default now(),
  updated_at    timestamptz not null default now(),
  paused_at     timestamptz,
  constraint schedules_pkey primary key (schedule_name),
  constraint schedules_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug) on delete cascade,
  constraint schedules_name_is_valid check (pgflow.is_valid_slug(schedule_name)),
  constraint schedules_cron_not_empty check (btrim(cron) <> ''),
  constraint schedules_missed_is_valid check (missed in ('skip', 'catch_up')),
  constraint schedules_max_catch_up_in_range check (max_catch_up between 1 and 1000),
  constraint schedules_paused_at_only_when_paused check (paused or paused_at is null)
);

create index idx_schedules_flow_slug on pgflow.schedules (flow_slug);

comment on table pgflow.schedules is
  'Cron schedules that start runs of a flow with a fixed input; one row per schedule name.';
comment on column pgflow.schedules.schedule_name is
  'Name of the schedule (a slug); part of every run id the schedule derives (pgflow.schedule_run_id).';
comment on column pgflow.schedules.flow_slug is
  'Flow a tick starts.';
comment on column pgflow.schedules.cron is
  'Cron expression as written in the Go code: 5 fields, 6 with a leading seconds field, or a descriptor (@daily, @every 90m). Parsed by the workers.';
comment on column pgflow.schedules.time_zone is
  'IANA time zone the cron expression is read in (e.g. Europe/Berlin).';
comment on column pgflow.schedules.input is
  'Input of every run the schedule starts.';
comment on column pgflow.schedules.missed is
  'What happens to ticks that passed while no worker ran: skip (only the most recent due tick fires) or catch_up (every due tick fires in order, at most max_catch_up of them, the most recent ones).';
comment on column pgflow.schedules.max_catch_up is
  'Most ticks fired in one pass when missed = catch_up.';
comment on column pgflow.schedules.paused is
  'Operator state: a paused schedule fires nothing. Worker startups never change it.';
comment on column pgflow.schedules.last_tick is
  'Horizon: only ticks after it fire. The last fired tick, or when the schedule was created, its cron or zone changed, or it was resumed (ticks before those moments never fire).';
comment on column pgflow.schedules.last_run_id is
  'Run started by the most recent fired tick; NULL before the first.';
comment on column pgflow.schedules.next_tick is
  'Next tick as last computed by a worker (informational, for list views); NULL when unknown.';
comment on column pgflow.schedules.created_at is
  'When the schedule was first written.';
comment on column pgflow.schedules.updated_at is
  'When a worker last changed its definition (or an operator paused or resumed it).';
comment on column pgflow.schedules.paused_at is
  'When the schedule was paused; NULL while it is active.';

-- New and changed functions, generated from sql/core (`go generate ./schema`).

-- generated from sql/core: 0009_function__new_run_ids.sql
create or replace function pgflow._new_run_ids(n integer)
returns uuid[]
language plpgsql
volatile
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
-- PL/pgSQL rather than SQL: PostgreSQL 15 plans the body of an SQL function that it cannot inline (this one pins
-- its search_path) on every call; PL/pgSQL keeps the plan for the session.
as $$
begin
  -- gen_random_uuid() already carries the RFC variant bits (10) and 122 random bits: its first 6 bytes become the
  -- Unix time in milliseconds (big-endian, the low 6 bytes of an int8) and its version nibble 4 becomes 7. The
  -- subquery in FROM is evaluated once per element (its volatile target list keeps it from being pulled up).
  return (
    select coalesce(array_agg(encode(set_byte(overlay(r.b placing substring(int8send(r.ms) from 3 for 6) from 1 for 6),
                                              6, (get_byte(r.b, 6) & 15) | 112),
                                     'hex')::uuid order by r.i),
                    '{}')
      from (select g.i,
                   uuid_send(gen_random_uuid()) as b,
                   floor(extract(epoch from clock_timestamp()) * 1000)::int8 as ms
              from generate_series(1, _new_run_ids.n) as g (i)) as r);
end;
$$;

comment on function pgflow._new_run_ids(n integer) is $doc$
pgflow._new_run_ids(n) guarantees (v0.20.0): an array of n fresh run ids, each exactly what pgflow._new_run_id()
makes (the version 7 layout of RFC 9562: the Unix time in milliseconds of clock_timestamp() when that element is
made, version 7, the RFC variant, 74 random bits), in the order they were made; an empty array for n 0 or less
or NULL. One call for a batch of runs (start_flows): a call per id costs more than the id.
$doc$;
-- end generated

-- generated from sql/core: 0010_function__new_run_id.sql
create or replace function pgflow._new_run_id()
returns uuid
language sql
volatile
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select (pgflow._new_run_ids(1))[1]
$$;

comment on function pgflow._new_run_id() is $doc$
pgflow._new_run_id() guarantees (v0.20.0): a fresh run id in the version 7 layout of RFC 9562 - the id start_flow
and start_flows give a run when the caller passes none (they make it with pgflow._new_run_ids), and the default of
runs.run_id. Bits 0-47 are the Unix time in milliseconds of clock_timestamp() at the call (not of the transaction's
start), then version 7, then the RFC variant bits 10; the other 74 bits are random (from gen_random_uuid, the same
source as before v0.20.0). Ids made in different milliseconds never collide; within one millisecond two ids collide
with probability 2^-74. Ids made in different milliseconds sort (uuid order, bytewise) in the order of their
clocks, so new runs land at the right end of every index that leads with run_id instead of on random pages of it.
Within one millisecond the order is random: not monotonic, no counter, no state shared between sessions. The order
holds only as far as the server's clock does (a clock set back gives smaller ids). Volatile; reads and writes no
table. The time of the start is readable from the id.
$doc$;
-- end generated

-- Run ids made by the engine are time-ordered (version 7 layout, pgflow._new_run_id above): a start inserts at the
-- right end of runs_pkey, step_states_pkey and step_tasks_pkey instead of on random pages of them. Existing ids
-- stay as they are; a new default needs no table rewrite.
alter table pgflow.runs
  alter column run_id set default pgflow._new_run_id();

-- Roles that may start runs or insert them (the column default runs as the inserting role) may make their ids
-- (start_flow and start_flows make them with pgflow._new_run_ids).
do $run_id_grants$
declare
  v_grantee text;
begin
  for v_grantee in
    select distinct a.grantee::regrole::text
      from pg_catalog.pg_proc as p
      cross join lateral pg_catalog.aclexplode(p.proacl) as a
     where p.oid in (pg_catalog.to_regprocedure('pgflow.start_flow(text,jsonb,uuid)'),
                     pg_catalog.to_regprocedure('pgflow.start_flows(text,jsonb[],uuid[])'))
       and a.privilege_type = 'EXECUTE'
       and a.grantee <> 0
       and a.grantee <> p.proowner
    union
    select a.grantee::regrole::text
      from pg_catalog.pg_class as c
      cross join lateral pg_catalog.aclexplode(c.relacl) as a
     where c.oid = 'pgflow.runs'::regclass
       and a.privilege_type = 'INSERT'
       and a.grantee <> 0
       and a.grantee <> c.relowner
  loop
    execute format('grant execute on function pgflow._new_run_id(), pgflow._new_run_ids(integer) to %s', v_grantee);
  end loop;
end;
$run_id_grants$;

-- generated from sql/core: 0010_function_schema_version.sql
create or replace function pgflow.schema_version()
returns text
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select '0.20.0'::text
$$;

comment on function pgflow.schema_version() is $doc$
pgflow.schema_version() guarantees (since v0.20.0): returns the version of the pgflow-go schema installed in this
database, e.g. '0.20.0' - the version of the newest migration applied (each migration redefines it). Clients and
workers check it once at startup and refuse to run against an older schema ("run `pgflow migrate up`"); a
database without this function is older than v0.20.0.
$doc$;
-- end generated

-- generated from sql/core: 0010_function_schedule_run_id.sql
create or replace function pgflow.schedule_run_id(schedule_name text, tick timestamptz)
returns uuid
language sql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  -- Version 5 layout (name-based, SHA-based): the first 16 bytes of a SHA-256, with the version nibble set to 5
  -- and the variant bits to 10. The tick is rendered in UTC with microseconds, so the session's TimeZone never
  -- changes the id.
  with h as (
    select encode(sha256(convert_to(
             'pgflow-schedule:' || schedule_name || ':'
             || to_char(tick at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
             'UTF8')), 'hex') as x
  )
  select (substr(h.x, 1, 12) || '5'
          || substr(h.x, 14, 3)
          || substr('89ab',
               (('x' || substr(h.x, 17, 1))::bit(4)::int & 3)
               + 1, 1)
          || substr(h.x, 18, 15))::uuid
    from h
$$;

comment on function pgflow.schedule_run_id(schedule_name text, tick timestamptz) is $doc$
pgflow.schedule_run_id(schedule_name, tick) guarantees (v0.20.0): the run id a schedule's tick starts, derived
only from the two arguments - the same schedule and tick always give the same id, in every session and time
zone, so a tick fired twice (two workers, a retried transaction) collides on runs_pkey instead of starting a
second run. A version-5-style UUID: the first 16 bytes of sha256('pgflow-schedule:<name>:<tick in UTC as
YYYY-MM-DDTHH:MI:SS.USZ>'), version nibble 5, RFC 4122 variant. Immutable; NULL for a NULL argument.
$doc$;
-- end generated

-- generated from sql/core: 0012_function__step_queue_name.sql
create or replace function pgflow._step_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select case
    when length(lower(flow_slug) || '__' || lower(step_slug)) <= 47 then lower(flow_slug) || '__' || lower(step_slug)
    else lower(flow_slug) || '__' || step_index::text
  end;
$$;

comment on function pgflow._step_queue_name(flow_slug text, step_slug text, step_index integer) is $doc$
pgflow._step_queue_name(flow_slug, step_slug, step_index) guarantees (v0.20.0): the canonical name of the private
queue of a step of a flow with per-step queues (flows.queue_mode = 'step'): lower(flow_slug) || '__' ||
lower(step_slug) when that fits PGMQ's 47 characters, else lower(flow_slug) || '__' || step_index. Slugs of such
flows never start or end with '_' nor contain '__', and a slug never starts with a digit, so the name is told
apart from every other flow's queues and steps' queues: the part before the first '__' is the flow, and the part
after it is a step slug or, only for long names, a step index. The result may still exceed 47 characters for a
flow slug longer than 40; add_step refuses such a route before anything is written. NULL in, NULL out. Immutable
and pure: the one definition of a per-step route.
$doc$;
-- end generated

-- generated from sql/core: 0090_function__check_step_mode_slug.sql
create or replace function pgflow._check_step_mode_slug(p_slug text, p_kind text, p_flow_slug text, p_max_length integer)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_rule text;
begin
  if p_slug is null then
    return;
  end if;
  if p_max_length is not null and length(p_slug) > p_max_length then
    v_rule := format('is %s characters long; at most %s are allowed, so that its steps'' queue names fit PGMQ''s 47',
      length(p_slug), p_max_length);
  elsif p_slug like '\_%' or p_slug like '%\_' then
    v_rule := 'starts or ends with ''_''';
  elsif strpos(p_slug, '__') > 0 then
    v_rule := 'contains ''__''';
  else
    return;
  end if;
  raise exception using
    errcode = '22023',
    message = case p_kind
      when 'Flow' then format('Flow slug "%s" %s, which a flow with per-step queues does not allow', p_slug, v_rule)
      else format('Step slug "%s" of flow "%s" %s, which a flow with per-step queues does not allow',
                  p_slug, p_flow_slug, v_rule)
    end,
    hint = 'Per-step queues are named <flow>__<step>; the slugs must keep that name unambiguous. Rename the slug.';
end;
$$;

comment on function pgflow._check_step_mode_slug(p_slug text, p_kind text, p_flow_slug text, p_max_length integer) is $doc$
pgflow._check_step_mode_slug(p_slug, p_kind, p_flow_slug, p_max_length) guarantees (v0.20.0): returns when p_slug
(a flow slug when p_kind = 'Flow', else a step slug of flow p_flow_slug) may be used by a flow with per-step
queues, and otherwise raises 22023 naming the slug and the rule it breaks: longer than p_max_length (NULL = no
limit), starting or ending with '_', or containing '__'. These rules make the queue names of
pgflow._step_queue_name unambiguous. NULL slugs pass (the slug CHECK constraints reject them). Pure.
$doc$;
-- end generated

-- generated from sql/core: 0090_function__notify.sql
create or replace function pgflow._notify(channels text[], payloads text[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if coalesce(cardinality(_notify.channels), 0) = 0 then
    return;
  end if;
  -- PostgreSQL serialises the commits of notifying transactions with one cluster-wide lock that each holds through
  -- its commit's WAL flush, so notifying transactions cannot share a flush. A caller that sets
  -- pgflow.defer_notifications for its transaction takes the notifications back instead (the transaction-local
  -- setting pgflow.deferred_notifications) and sends them itself after its commit, in a transaction that writes
  -- nothing and need not wait for a flush.
  if pg_catalog.current_setting('pgflow.defer_notifications', true) = 'on' then
    perform pg_catalog.set_config('pgflow.deferred_notifications',
      (coalesce(nullif(pg_catalog.current_setting('pgflow.deferred_notifications', true), ''), '[]')::jsonb
        || coalesce((select pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(n.channel, n.payload) order by n.pos)
                       from unnest(_notify.channels, _notify.payloads) with ordinality as n (channel, payload, pos)),
                    '[]'::jsonb))::text,
      true);
    return;
  end if;
  -- pg_notify is volatile, so the planner evaluates it after the sort: notifications go out in array order.
  perform pg_catalog.pg_notify(n.channel, n.payload)
     from unnest(_notify.channels, _notify.payloads) with ordinality as n (channel, payload, pos)
    order by n.pos;
end;
$$;

comment on function pgflow._notify(channels text[], payloads text[]) is $doc$
pgflow._notify(channels, payloads) guarantees (v0.20.0; every notification of the schema goes through it):
  * by default, pg_notify(channels[i], payloads[i]) for every i, in array order, inside the caller's transaction
    (delivered only if it commits; PostgreSQL folds identical notifications of a transaction);
  * when the transaction has set pgflow.defer_notifications to 'on' (set_config(..., true)), nothing is notified:
    the pairs are appended, in order, to the transaction-local setting pgflow.deferred_notifications, a JSON array
    of [channel, payload] arrays, which the caller reads before it commits and sends after the commit
    (the Go client and worker do, with synchronous_commit off). The caller then owns delivery: a notification it does not send is lost;
  * NULL or empty arrays do nothing; the arrays are paired by position (unnest), so they should be equally long;
    an array of two or more dimensions is read as unnest reads it, in storage order (row by row).
$doc$;
-- end generated

-- generated from sql/core: 0090_function__trusted_realtime_send.sql
create or replace function pgflow._trusted_realtime_send()
returns regprocedure
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_fn      regprocedure := pg_catalog.to_regprocedure('realtime.send(jsonb,text,text,boolean)');
  v_trusted boolean;
  v_owner   text;
begin
  if v_fn is null then
    return null;
  end if;

  select bool_and(o.rolsuper or o.oid = pn.nspowner), pg_catalog.string_agg(o.rolname, ', ')
    into v_trusted, v_owner
    from pg_catalog.pg_proc as p
    join pg_catalog.pg_namespace as rn on rn.oid = p.pronamespace
    join pg_catalog.pg_namespace as pn on pn.nspname = 'pgflow'
    join pg_catalog.pg_roles as o on o.oid in (p.proowner, rn.nspowner)
   where p.oid = v_fn;

  if coalesce(v_trusted, false) then
    return v_fn;
  end if;

  if pg_catalog.current_setting('pgflow.untrusted_realtime_logged', true) is distinct from 'on' then
    raise log 'pgflow: not calling %: it or schema realtime is owned by % (neither a superuser nor the owner of schema pgflow), so events are not sent to Supabase Realtime',
      v_fn, v_owner;
    perform pg_catalog.set_config('pgflow.untrusted_realtime_logged', 'on', false);
  end if;
  return null;
end;
$$;

comment on function pgflow._trusted_realtime_send() is $doc$
pgflow._trusted_realtime_send() guarantees (v0.20.0): returns realtime.send(jsonb, text, text, boolean) when that
function exists and can be trusted with the rights of whoever emits events (the pgflow owner inside SECURITY
DEFINER functions, a worker role otherwise); NULL otherwise. Trusted means: both the function and schema
realtime are owned by a superuser or by the owner of schema pgflow (Supabase: supabase_admin / postgres). A
realtime.send that any other role created (a role with CREATE on the database can create schema realtime) is
never called: its code would run with pgflow's rights on every state change. When such an untrusted function is
found, one LOG line per session says so (server log only; clients do not see it).
$doc$;
-- end generated

-- generated from sql/core: 0090_function__validate_flow_shape.sql
create or replace function pgflow._validate_flow_shape(p_flow_slug text, p_shape jsonb)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_step  jsonb;
  v_pos   bigint;
  v_slug  text;
  v_seen  text[] := '{}';
  v_key   text;
  v_value jsonb;
  v_where text;
  v_min   integer;
begin
  if p_shape is null then
    raise exception 'Flow shape for "%" is NULL, expected a JSON object with "steps"', p_flow_slug
      using errcode = '22023';
  end if;
  if jsonb_typeof(p_shape) <> 'object' then
    raise exception 'Flow shape for "%" is a JSON %, expected an object with "steps": %',
      p_flow_slug, jsonb_typeof(p_shape), left(p_shape::text, 200)
      using errcode = '22023';
  end if;
  if jsonb_typeof(p_shape -> 'steps') is distinct from 'array' then
    raise exception 'Flow shape for "%" has "steps" of type %, expected an array',
      p_flow_slug, coalesce(jsonb_typeof(p_shape -> 'steps'), 'missing')
      using errcode = '22023';
  end if;

  for v_step, v_pos in select e.value, e.pos from jsonb_array_elements(p_shape -> 'steps') with ordinality as e (value, pos) loop
    if jsonb_typeof(v_step) <> 'object' then
      raise exception 'Flow shape for "%": step #% is a JSON %, expected an object', p_flow_slug, v_pos, jsonb_typeof(v_step)
        using errcode = '22023';
    end if;
    if jsonb_typeof(v_step -> 'slug') is distinct from 'string' then
      raise exception 'Flow shape for "%": step #% has "slug" of type %, expected a string',
        p_flow_slug, v_pos, coalesce(jsonb_typeof(v_step -> 'slug'), 'missing')
        using errcode = '22023';
    end if;
    v_slug := v_step ->> 'slug';
    if v_slug = any (v_seen) then
      raise exception 'Flow shape for "%": step slug "%" appears more than once', p_flow_slug, v_slug
        using errcode = '22023';
    end if;
    v_seen := v_seen || v_slug;

    if v_step ? 'dependencies' and (jsonb_typeof(v_step -> 'dependencies') <> 'array'
        or exists (select 1 from jsonb_array_elements(v_step -> 'dependencies') as d (value)
                    where jsonb_typeof(d.value) <> 'string')) then
      raise exception 'Flow shape for "%": step "%" has "dependencies" %, expected an array of step slugs',
        p_flow_slug, v_slug, left((v_step -> 'dependencies')::text, 200)
        using errcode = '22023';
    end if;
    if v_step ? 'stepType' and (v_step -> 'stepType') not in ('"single"'::jsonb, '"map"'::jsonb) then
      raise exception 'Flow shape for "%": step "%" has "stepType" %, expected "single" or "map"',
        p_flow_slug, v_slug, v_step -> 'stepType'
        using errcode = '22023';
    end if;
    foreach v_key in array array['whenUnmet', 'whenExhausted'] loop
      if v_step ? v_key and (v_step -> v_key) not in ('"fail"'::jsonb, '"skip"'::jsonb, '"skip-cascade"'::jsonb) then
        raise exception 'Flow shape for "%": step "%" has "%" %, expected "fail", "skip" or "skip-cascade"',
          p_flow_slug, v_slug, v_key, v_step -> v_key
          using errcode = '22023';
      end if;
    end loop;
  end loop;

  -- Options: the flow's, then each step's.
  for v_where, v_value in
    select 'flow options', p_shape -> 'options' where p_shape ? 'options'
    union all
    select format('step "%s" options', e.value ->> 'slug'), e.value -> 'options'
      from jsonb_array_elements(p_shape -> 'steps') with ordinality as e (value, pos)
     where e.value ? 'options'
  loop
    if jsonb_typeof(v_value) <> 'object' then
      raise exception 'Flow shape for "%": % is a JSON %, expected an object', p_flow_slug, v_where, jsonb_typeof(v_value)
        using errcode = '22023';
    end if;
    foreach v_key in array array['maxAttempts', 'baseDelay', 'timeout', 'startDelay'] loop
      continue when not v_value ? v_key or jsonb_typeof(v_value -> v_key) = 'null';
      v_min := case v_key when 'maxAttempts' then 1 when 'timeout' then 1 else 0 end;
      if jsonb_typeof(v_value -> v_key) <> 'number'
         or (v_value ->> v_key)::numeric <> trunc((v_value ->> v_key)::numeric)
         or (v_value ->> v_key)::numeric not between v_min and 2147483647 then
        raise exception 'Flow shape for "%": % has %: %, expected a whole number between % and 2147483647',
          p_flow_slug, v_where, v_key, v_value -> v_key, v_min
          using errcode = '22023';
      end if;
    end loop;
  end loop;
end;
$$;

comment on function pgflow._validate_flow_shape(p_flow_slug text, p_shape jsonb) is $doc$
pgflow._validate_flow_shape(p_flow_slug, p_shape) guarantees (v0.20.0): raises 22023 (invalid_parameter_value)
with a message naming the flow, the step and the bad value when the shape is not one the Go DSL could produce,
and returns normally otherwise; it reads no table and changes nothing. Checked: the shape is a JSON object (not
NULL, not a string); "steps" is present and an array; every step is an object whose "slug" is a string, unique
within the shape; "dependencies", when present, is an array of strings; "stepType" is 'single' or 'map';
"whenUnmet" and "whenExhausted" are 'fail', 'skip' or 'skip-cascade'; "options" (flow and step), when present,
is an object whose maxAttempts (1..2147483647), baseDelay (0..), timeout (1..) and startDelay (0..) are whole
numbers. Slug syntax, dependency existence, map rules and patterns are left to create_flow and add_step, which
check them with their own errors.
$doc$;
-- end generated

-- generated from sql/core: 0095_function__lock_flow_for_start.sql
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
-- end generated
-- generated from sql/core: 0095_function__guard_definition_keys.sql
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
-- end generated
-- generated from sql/core: 0095_function__finish_run_steps.sql
create or replace function pgflow._finish_run_steps(run_id uuid, skip_reason text)
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_events  jsonb[];
  v_skipped integer;
  v_queue   record;
begin
  if _finish_run_steps.skip_reason is null or _finish_run_steps.skip_reason not in ('run_failed', 'run_cancelled') then
    raise exception '_finish_run_steps: skip_reason must be run_failed or run_cancelled, got %',
      coalesce(_finish_run_steps.skip_reason, 'NULL')
      using errcode = '22023';
  end if;

  -- Step states first, then tasks: the lock order of complete_task, fail_task and requeue_stalled_tasks (the
  -- caller holds the run).
  with skipped as (
    update pgflow.step_states as ss
       set status = 'skipped',
           skip_reason = _finish_run_steps.skip_reason,
           skipped_at = now(),
           remaining_tasks = null
     where ss.run_id = _finish_run_steps.run_id
       and ss.status in ('created', 'started')
    returning ss.*
  )
  select count(*)::integer,
         array_agg(jsonb_build_object(
                     'event_type', 'step:skipped',
                     'run_id', sk.run_id,
                     'flow_slug', sk.flow_slug,
                     'step_slug', sk.step_slug,
                     'status', sk.status,
                     'skip_reason', sk.skip_reason,
                     'skipped_at', sk.skipped_at) order by s.step_index)
    into v_skipped, v_events
    from skipped as sk
    join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug;

  if v_skipped > 0 then
    update pgflow.runs as r
       set remaining_steps = greatest(r.remaining_steps - v_skipped, 0)
     where r.run_id = _finish_run_steps.run_id;
    perform pgflow._emit_events(v_events);
  end if;

  for v_queue in
    with locked as (
      select t.step_slug, t.task_index, t.status as old_status
        from pgflow.step_tasks as t
       where t.run_id = _finish_run_steps.run_id
         and t.status in ('queued', 'started')
       order by t.step_slug, t.task_index
         for update
    ),
    cancelled as (
      update pgflow.step_tasks as t
         set status = 'cancelled'
        from locked as l
       where t.run_id = _finish_run_steps.run_id
         and t.step_slug = l.step_slug
         and t.task_index = l.task_index
      returning t.queue_name, t.message_id, l.old_status
    )
    select c.queue_name,
           array_agg(c.message_id order by c.message_id) filter (where c.message_id is not null) as msg_ids,
           bool_or(c.old_status = 'started') as had_started
      from cancelled as c
     group by c.queue_name
     order by c.queue_name
  loop
    if v_queue.msg_ids is not null then
      perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
    end if;
    if v_queue.had_started then
      perform pgflow._notify(array['pgflow:queue:' || v_queue.queue_name],
                             array['{"cancel_run":"' || _finish_run_steps.run_id::text || '"}']);
    end if;
  end loop;

  return v_skipped;
end;
$$;

comment on function pgflow._finish_run_steps(run_id uuid, skip_reason text) is $doc$
pgflow._finish_run_steps(run_id, skip_reason) guarantees (v0.20.0; the one place where a run that fails or is
cancelled makes its unfinished work look finished; the caller holds the run row and changes the run's own status
afterwards):
  * skip_reason must be 'run_failed' or 'run_cancelled', else SQLSTATE 22023 naming the value, before anything
    changes;
  * every step state of the run that is 'created' or 'started' becomes 'skipped' with that skip_reason
    (skipped_at now, remaining_tasks NULL); failed and completed steps keep their status; the run's
    remaining_steps drops by their number; step:skipped is emitted per step, in step_index order (one
    _emit_events call);
  * every task of the run that is 'queued' or 'started' becomes 'cancelled' (its other columns are kept, so a
    report of its attempt is fenced: complete_task, complete_tasks and fail_task change nothing for it); failed
    and completed tasks keep their status;
  * their messages are archived from the queues the tasks stored (step_tasks.queue_name), one batch
    pgmq.archive call per queue;
  * for every queue that had a 'started' task of the run, pg_notify('pgflow:queue:<queue>',
    '{"cancel_run":"<run_id>"}') tells the workers to cancel the handlers still running for the run (at commit);
  * returns the number of steps skipped. Rows are locked in the order step states, then tasks.
$doc$;
-- end generated

-- generated from sql/core: 0095_function__notify_queue_visible_at.sql
create or replace function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  if _notify_queue_visible_at.queue_name is null or _notify_queue_visible_at.visible_at is null then
    return;
  end if;
  -- Every distinct time is announced: a worker keeps all of them, so a message due later than another one of the
  -- same transaction is not left to its periodic read. PostgreSQL folds identical notifications of a transaction.
  perform pgflow._notify(
    array['pgflow:queue:' || _notify_queue_visible_at.queue_name],
    array['{"visible_at":"' || pg_catalog.to_char(_notify_queue_visible_at.visible_at at time zone 'UTC',
                                                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') || '"}']);
end;
$$;

comment on function pgflow._notify_queue_visible_at(queue_name text, visible_at timestamptz) is $doc$
pgflow._notify_queue_visible_at(queue_name, visible_at) guarantees (v0.20.0): tells the workers listening on
'pgflow:queue:<queue_name>' that a message of that queue becomes visible at visible_at, with the payload
{"visible_at":"<RFC 3339 time in UTC, microseconds>"} (e.g. {"visible_at":"2025-01-02T03:04:05.123456Z"}), so a
worker can wake exactly then instead of at its next poll. Every call announces its time, so a transaction that
delays messages of one queue by several amounts announces each of them; identical announcements of one
transaction reach the listeners once, as PostgreSQL folds identical notifications. NULL arguments do nothing.
Notifications go out at commit (none on rollback). Callers announce times in the future only; the empty payload
'' keeps meaning "visible now".
$doc$;
-- end generated

-- generated from sql/core: 0095_function__wake_queue.sql
create or replace function pgflow._wake_queue(queue_name text, delay_seconds integer)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_worker uuid;
begin
  if coalesce(_wake_queue.delay_seconds, 0) > 0 then
    perform pgflow._notify_queue_visible_at(_wake_queue.queue_name,
                                            clock_timestamp() + make_interval(secs => _wake_queue.delay_seconds));
    return;
  end if;
  -- One alive worker of the queue is told, not all of them: every worker told reads the queue, and all but one of
  -- those reads would come back empty (a thundering herd, one read per worker process per start). Alive means
  -- what RunHealth counts as alive: not stopped, not deprecated, a heartbeat within the last 30 s (six default
  -- heartbeat intervals). Only a worker whose heartbeat says it listens on its own channel may be chosen: a wake
  -- sent to one that does not (pgflow's TypeScript worker, an older or PollOnly Go worker, a Go worker whose
  -- LISTEN connection is down, one killed without stopping: the heartbeats of its queue's other workers forget a
  -- listening session that ended) is lost, and its messages wait for a periodic read. The session is not checked
  -- here: pg_stat_get_activity copies every backend's status on its first call in a transaction, which cost a
  -- lone wake 100-280 us. Random, not round-robin: a
  -- rotation needs a shared counter that every start would write. idx_workers_listening serves the lookup.
  select w.worker_id into v_worker
    from pgflow.workers as w
   where w.queue_name = _wake_queue.queue_name
     and w.stopped_at is null
     and w.deprecated_at is null
     and w.listens_at is not null
     and w.last_heartbeat_at >= clock_timestamp() - interval '30 seconds'
   order by pg_catalog.random()
   limit 1;
  if v_worker is null then
    perform pgflow._notify(array['pgflow:queue:' || _wake_queue.queue_name], array['']);
  else
    perform pgflow._notify(array['pgflow:w:' || v_worker::text], array['']);
  end if;
end;
$$;

comment on function pgflow._wake_queue(queue_name text, delay_seconds integer) is $doc$
pgflow._wake_queue(queue_name, delay_seconds) guarantees (v0.20.0): tells the workers of queue_name that messages
were just sent to that queue (or made visible again) with the given delay.
  * Delay of 0 or less or NULL (read now), since v0.20.0 targeted: when the queue has an alive listening worker
    (a pgflow.workers row of queue_name with stopped_at and deprecated_at NULL, last_heartbeat_at within 30 s of
    clock_timestamp() and listens_at not NULL, i.e. its last heartbeat said it listens on its own channel),
    exactly one of them, chosen at random, is notified on its own channel 'pgflow:w:<worker_id>' with payload '';
    nothing is sent on 'pgflow:queue:<queue_name>'. When the queue has no alive listening worker, payload '' goes
    to 'pgflow:queue:<queue_name>' (every listener, as before v0.20.0: SQL-only consumers and workers that do not
    listen on their own channel). Workers that are stopped, deprecated, without a recent heartbeat or not
    listening (listens_at NULL: every row registered and heartbeated only through pgflow's signatures, such as
    pgflow's TypeScript worker, and a worker whose listening session ended once another worker of its queue has
    heartbeated since, see pgflow.heartbeat_worker) are never notified on their own channel. A chosen worker that
    is busy or gone
    loses no message: the messages stay visible in the queue and any worker's next read takes them (a Go worker
    reads at least every 2 s; a Go worker that cannot take everything it was woken for passes the wake on to the
    queue channel).
  * Delay above 0: pgflow._notify_queue_visible_at with clock_timestamp() + delay, which is never earlier than the
    visibility the messages got a moment before (a broadcast on the queue channel: every worker keeps the time).
Every notification goes through pgflow._notify (so a transaction that defers its notifications gets these back
too). The functions that send task messages (start_ready_steps, _start_ready_steps_batch, retry_run) wake workers
through it; fail_task announces its message's exact retry time itself. Notifications go out at commit (or after
it, when deferred); PostgreSQL folds identical ones of a transaction (two calls of one transaction may choose two
workers). Needs SELECT on
pgflow.workers (pgflow_worker has it; the SECURITY DEFINER start functions run as the owner).
$doc$;
-- end generated

-- generated from sql/core: 0100_function__create_flow_from_shape.sql
create or replace function pgflow._create_flow_from_shape(p_flow_slug text, p_shape jsonb, p_queue_mode text default null,
                                                          p_message_retention text default null)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_options jsonb := coalesce(p_shape -> 'options', '{}'::jsonb);
  v_steps   jsonb := coalesce(p_shape -> 'steps', '[]'::jsonb);
  v_step    jsonb;
  v_opts    jsonb;
begin
  if jsonb_typeof(v_steps) <> 'array' then
    raise exception 'Flow shape for "%" has "steps" of type %, expected an array', p_flow_slug, jsonb_typeof(v_steps)
      using errcode = '22023';
  end if;

  perform pgflow.create_flow(
    flow_slug    => p_flow_slug,
    max_attempts => (v_options ->> 'maxAttempts')::int,
    base_delay   => (v_options ->> 'baseDelay')::int,
    timeout      => (v_options ->> 'timeout')::int,
    queue_mode   => p_queue_mode,
    message_retention => p_message_retention
  );

  for v_step in select e.value from jsonb_array_elements(v_steps) with ordinality as e(value, pos) order by e.pos loop
    v_opts := coalesce(v_step -> 'options', '{}'::jsonb);
    perform pgflow.add_step(
      flow_slug               => p_flow_slug,
      step_slug               => v_step ->> 'slug',
      deps_slugs              => array(
        select jsonb_array_elements_text(coalesce(v_step -> 'dependencies', '[]'::jsonb))),
      max_attempts            => (v_opts ->> 'maxAttempts')::int,
      base_delay              => (v_opts ->> 'baseDelay')::int,
      timeout                 => (v_opts ->> 'timeout')::int,
      start_delay             => (v_opts ->> 'startDelay')::int,
      step_type               => v_step ->> 'stepType',
      required_input_pattern  => case when (v_step -> 'requiredInputPattern' ->> 'defined')::boolean
                                      then v_step -> 'requiredInputPattern' -> 'value' end,
      forbidden_input_pattern => case when (v_step -> 'forbiddenInputPattern' ->> 'defined')::boolean
                                      then v_step -> 'forbiddenInputPattern' -> 'value' end,
      when_unmet              => coalesce(v_step ->> 'whenUnmet', 'skip'),
      when_exhausted          => coalesce(v_step ->> 'whenExhausted', 'fail')
    );
  end loop;
end;
$$;

comment on function pgflow._create_flow_from_shape(p_flow_slug text, p_shape jsonb, p_queue_mode text, p_message_retention text) is $doc$
pgflow._create_flow_from_shape(p_flow_slug, p_shape, p_queue_mode, p_message_retention) guarantees: defines the
flow described by a shape, using create_flow and add_step (so it has their idempotence and errors): flow options
from shape.options (maxAttempts, baseDelay, timeout; absent = create_flow defaults), the queue mode p_queue_mode
(NULL = 'flow'; v0.20.0) and the message retention p_message_retention (NULL = 'archive'; v0.20.0), then every element of shape.steps in array
order with its dependencies (absent = none), stepType (absent = 'single'), whenUnmet (absent = 'skip'),
whenExhausted (absent = 'fail'), patterns (only when {"defined": true}) and step options (maxAttempts,
baseDelay, timeout, startDelay; absent = inherit).
$doc$;
-- end generated

-- generated from sql/core: 0100_function__emit_event.sql
create or replace function pgflow._emit_event(payload jsonb, event text, run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_topic    text := 'pgflow:run:' || _emit_event.run_id::text;
  v_envelope text;
begin
  v_envelope := jsonb_strip_nulls(jsonb_build_object(
    'event_type', _emit_event.payload ->> 'event_type',
    'event', _emit_event.event,
    'run_id', _emit_event.run_id,
    'step_slug', _emit_event.payload ->> 'step_slug',
    'status', _emit_event.payload ->> 'status',
    'flow_slug', coalesce(
      _emit_event.payload ->> 'flow_slug',
      (select r.flow_slug from pgflow.runs as r where r.run_id = _emit_event.run_id))
  ))::text;

  perform pgflow._notify(array['pgflow', v_topic], array[v_envelope, v_envelope]);

  if pgflow._trusted_realtime_send() is not null then
    execute 'select realtime.send($1, $2, $3, $4)'
      using _emit_event.payload, _emit_event.event, v_topic, false;
  end if;
end;
$$;

comment on function pgflow._emit_event(payload jsonb, event text, run_id uuid) is $doc$
pgflow._emit_event(payload, event, run_id) guarantees:
  * the event is published inside the caller's transaction, so listeners see it only if the state change that
    caused it commits, and in the order the functions emitted it;
  * a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on the global channel
    'pgflow' and on the per-run channel 'pgflow:run:<run_id>' with a small
    JSON envelope {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"}; the
    envelope never carries inputs or outputs, so it always stays far below pg_notify's 8000-byte limit
    (slugs are at most 128 characters: the envelope is under 700 bytes);
  * when a trusted realtime.send(jsonb, text, text, boolean) exists (Supabase; see pgflow._trusted_realtime_send:
    one that an unprivileged role planted is never called), the full payload also goes to
    realtime.send(payload, event, 'pgflow:run:<run_id>', false); it is called through dynamic SQL so the
    schema does not depend on Supabase.
$doc$;
-- end generated

-- generated from sql/core: 0100_function__emit_envelopes.sql
create or replace function pgflow._emit_envelopes(
  event_types text[],
  run_ids     uuid[],
  flow_slugs  text[],
  step_slugs  text[],
  statuses    text[],
  payloads    jsonb[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_channels  text[];
  v_envelopes text[];
begin
  if coalesce(cardinality(_emit_envelopes.run_ids), 0) = 0 then
    return;
  end if;

  -- The envelope is written as text, byte for byte what jsonb_strip_nulls(jsonb_build_object(...))::text gives
  -- (keys in jsonb's order: by length, then bytes; NULL members left out: concat_ws skips them). No value needs
  -- JSON escaping: slugs are [a-zA-Z0-9_] (flows.slug_is_valid, steps_step_slug_check), run ids are UUIDs, event
  -- types and statuses come from this schema's fixed vocabulary. It is made from the fields themselves: the hot
  -- paths (start_flows, _start_ready_steps_batch, complete_tasks) build no JSON payload unless realtime.send
  -- needs one, which was about a third of a bulk start's CPU (docs/performance.md).
  --
  -- Each event goes to two channels: the aggregates collect a pair per event (an n x 2 array), which _notify reads
  -- row by row, so the notifications go out as (pgflow, event 1), (pgflow:run:<id>, event 1), (pgflow, event 2),
  -- ... The envelope is made once per event and the events are sorted once; a row per notification, sorted, cost
  -- about a fifth more (docs/performance.md).
  select array_agg(array['pgflow', 'pgflow:run:' || e.run_id] order by e.pos),
         array_agg(array[e.envelope, e.envelope] order by e.pos)
    into v_channels, v_envelopes
    from (
      select x.pos,
             x.run_id,
             '{' || concat_ws(', ',
               '"event": "' || case
                                 when x.step_slug is null then x.event_type
                                 else 'step:' || x.step_slug || ':' || split_part(x.event_type, ':', 2)
                               end || '"',
               '"run_id": "' || x.run_id || '"',
               '"status": "' || x.status || '"',
               '"flow_slug": "' || coalesce(
                 x.flow_slug,
                 (select r.flow_slug from pgflow.runs as r where r.run_id = x.run_id)) || '"',
               '"step_slug": "' || x.step_slug || '"',
               '"event_type": "' || x.event_type || '"') || '}' as envelope
        from unnest(_emit_envelopes.event_types, _emit_envelopes.run_ids, _emit_envelopes.flow_slugs,
                    _emit_envelopes.step_slugs, _emit_envelopes.statuses)
               with ordinality as x (event_type, run_id, flow_slug, step_slug, status, pos)
    ) as e;
  perform pgflow._notify(v_channels, v_envelopes);

  if _emit_envelopes.payloads is not null and pgflow._trusted_realtime_send() is not null then
    execute 'select realtime.send(
                      x.p,
                      case
                        when x.p ->> ''step_slug'' is null then x.p ->> ''event_type''
                        else ''step:'' || (x.p ->> ''step_slug'') || '':'' || split_part(x.p ->> ''event_type'', '':'', 2)
                      end,
                      ''pgflow:run:'' || (x.p ->> ''run_id''),
                      false)
               from unnest($1) with ordinality as x (p, pos)
              where x.p is not null
              order by x.pos'
      using _emit_envelopes.payloads;
  end if;
end;
$$;

comment on function pgflow._emit_envelopes(event_types text[], run_ids uuid[], flow_slugs text[], step_slugs text[], statuses text[], payloads jsonb[]) is $doc$
pgflow._emit_envelopes(event_types, run_ids, flow_slugs, step_slugs, statuses, payloads) guarantees (v0.20.0): the
events of pgflow._emit_events, given as their fields instead of JSON payloads. For every i, in array order (the
arrays are paired by position; a shorter or NULL array reads as NULLs):
  * a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on 'pgflow' and on
    'pgflow:run:<run_ids[i]>' with the envelope {"event_type", "event", "run_id", "step_slug" (step events:
    step_slugs[i] not NULL), "status", "flow_slug"} - byte for byte the envelope pgflow._emit_event sends, where
    event is event_types[i] for run events and 'step:<step_slug>:<what>' for step events (event type
    'step:<what>'), and a NULL flow_slugs[i] is read from the run;
  * when payloads is not NULL and a trusted realtime.send(jsonb, text, text, boolean) exists
    (pgflow._trusted_realtime_send), every non-NULL payload goes to realtime.send(payload, event,
    'pgflow:run:<run_id>', false), in array order (one dynamic statement). Callers build payloads only when
    pgflow._trusted_realtime_send() is not NULL: without Supabase Realtime no JSON is built for an event;
  * one statement builds every envelope, one call of pgflow._notify sends them; NULL or empty run_ids do nothing.
$doc$;
-- end generated

-- generated from sql/core: 0100_function__emit_events.sql
create or replace function pgflow._emit_events(payloads jsonb[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_event_types text[];
  v_run_ids     uuid[];
  v_flow_slugs  text[];
  v_step_slugs  text[];
  v_statuses    text[];
begin
  if _emit_events.payloads is null or cardinality(_emit_events.payloads) = 0 then
    return;
  end if;

  -- The envelopes and the realtime payloads are pgflow._emit_envelopes' business; this only takes the fields out.
  select array_agg(u.p ->> 'event_type'), array_agg((u.p ->> 'run_id')::uuid), array_agg(u.p ->> 'flow_slug'),
         array_agg(u.p ->> 'step_slug'), array_agg(u.p ->> 'status')
    into v_event_types, v_run_ids, v_flow_slugs, v_step_slugs, v_statuses
    from (select x.p from unnest(_emit_events.payloads) with ordinality as x (p, pos) order by x.pos) as u;
  perform pgflow._emit_envelopes(v_event_types, v_run_ids, v_flow_slugs, v_step_slugs, v_statuses,
                                 _emit_events.payloads);
end;
$$;

comment on function pgflow._emit_events(payloads jsonb[]) is $doc$
pgflow._emit_events(payloads) guarantees: the same as calling pgflow._emit_event(payload, event, run_id) for
every payload, in array order, with event = payload.event_type for run events and
'step:<step_slug>:<what>' for step events (event_type 'step:<what>'), and run_id = payload.run_id:
  * published inside the caller's transaction (seen by listeners only if it commits), in array order;
  * per payload, a notification (pgflow._notify: pg_notify, or deferred when the transaction asks) on 'pgflow'
    and on 'pgflow:run:<run_id>' with the same small envelope as
    _emit_event {"event_type", "event", "run_id", "step_slug" (step events), "status", "flow_slug"};
  * when a trusted realtime.send(jsonb, text, text, boolean) exists (pgflow._trusted_realtime_send), every full payload also goes to
    realtime.send(payload, event, 'pgflow:run:<run_id>', false), in array order (one dynamic statement);
  * it is pgflow._emit_envelopes of the payloads' fields, with the payloads for realtime.send (v0.20.0); NULL or
    empty payloads do nothing.
$doc$;
-- end generated

-- Roles that may emit events (pgflow._emit_events) may emit them from their fields: the start and the completion
-- of tasks do (v0.20.0).
select pg_temp.pgflow_v020_grant_with('pgflow._emit_events(jsonb[])',
  'pgflow._emit_envelopes(text[], uuid[], text[], text[], text[], jsonb[])');

-- generated from sql/core: 0100_function__send_step_tasks.sql
create or replace function pgflow._send_step_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  flow_slugs   text[],
  queue_names  text[],
  start_delays integer[],
  task_counts  integer[]
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_n     integer := coalesce(cardinality(_send_step_tasks.run_ids), 0);
  v_group record;
begin
  if v_n = 0 then
    return;
  end if;

  -- step:started; its JSON payload only for a trusted realtime.send. A step started in this transaction has
  -- started_at now(), remaining_tasks = its task count and no remaining dependency, so the payload is made from
  -- the arguments, as the stored state would give it.
  perform pgflow._emit_envelopes(
    array_fill('step:started'::text, array[v_n]),
    _send_step_tasks.run_ids,
    _send_step_tasks.flow_slugs,
    _send_step_tasks.step_slugs,
    array_fill('started'::text, array[v_n]),
    case
      when pgflow._trusted_realtime_send() is not null then array(
        select jsonb_build_object(
                 'event_type', 'step:started',
                 'run_id', x.run_id,
                 'flow_slug', x.flow_slug,
                 'step_slug', x.step_slug,
                 'status', 'started',
                 'started_at', now(),
                 'remaining_tasks', x.task_count,
                 'remaining_deps', 0)
          from unnest(_send_step_tasks.run_ids, _send_step_tasks.flow_slugs, _send_step_tasks.step_slugs,
                      _send_step_tasks.task_counts) with ordinality as x (run_id, flow_slug, step_slug, task_count, pos)
         order by x.pos)
    end);

  -- One send_batch per (queue, delay), in its form with headers and a time (the one PGMQ implements; the others
  -- are SQL functions that wrap it and are planned again on every call). send_batch returns the new ids in array
  -- order and ids increase along the array, so the n-th smallest id belongs to the n-th message of the array:
  -- the tasks of a group are numbered once, by (run_id, step_slug, task_index), and both the task rows and the
  -- message array follow that numbering.
  for v_group in
    select distinct x.queue_name, x.start_delay
      from unnest(_send_step_tasks.queue_names, _send_step_tasks.start_delays) as x (queue_name, start_delay)
     order by x.queue_name, x.start_delay
  loop
    with tasks as (
      select x.flow_slug, x.run_id, x.step_slug, i.i as task_index,
             row_number() over (order by x.run_id, x.step_slug, i.i) as n
        from unnest(_send_step_tasks.flow_slugs, _send_step_tasks.run_ids, _send_step_tasks.step_slugs,
                    _send_step_tasks.queue_names, _send_step_tasks.start_delays, _send_step_tasks.task_counts)
               as x (flow_slug, run_id, step_slug, queue_name, start_delay, initial_tasks)
        cross join lateral generate_series(0, x.initial_tasks - 1) as i (i)
       where x.queue_name = v_group.queue_name
         and x.start_delay = v_group.start_delay
    ),
    -- The message ids, ascending, in one array (one row: send_batch runs once), so the n-th task takes the n-th
    -- id by subscript: no join of the two sets, which the join methods these functions allow (nested loops only)
    -- would make quadratic.
    sent as (
      select array_agg(s.msg_id order by s.msg_id) as msg_ids
        from pgmq.send_batch(
               v_group.queue_name,
               array(
                 select jsonb_build_object(
                          'flow_slug', m.flow_slug,
                          'run_id', m.run_id,
                          'step_slug', m.step_slug,
                          'task_index', m.task_index)
                   from tasks as m
                  order by m.n),
               null::jsonb[],
               clock_timestamp() + make_interval(secs => v_group.start_delay)) as s (msg_id)
    )
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select t.flow_slug, t.run_id, t.step_slug, t.task_index, sent.msg_ids[t.n], v_group.queue_name
      from tasks as t
      cross join sent;

    -- Wake the workers waiting on this queue (one notification per queue and transaction: PostgreSQL folds
    -- identical notifications of one transaction). Delayed messages: tell them when the messages become visible,
    -- one announcement per (queue, delay) group.
    perform pgflow._wake_queue(v_group.queue_name, v_group.start_delay);
  end loop;
end;
$$;

comment on function pgflow._send_step_tasks(run_ids uuid[], step_slugs text[], flow_slugs text[], queue_names text[], start_delays integer[], task_counts integer[]) is $doc$
pgflow._send_step_tasks(run_ids, step_slugs, flow_slugs, queue_names, start_delays, task_counts) guarantees
(v0.20.0): what follows when steps become 'started' - the caller has made the step states (run_ids[i],
step_slugs[i]) of flow flow_slugs[i] 'started' in this transaction (started_at now(), remaining_tasks =
task_counts[i], remaining_deps 0) and lists them by run, then step_index. For every i, in array order:
  * step:started is emitted (pgflow._emit_envelopes, status 'started'); when a trusted realtime.send exists its
    payload {event_type, run_id, flow_slug, step_slug, status, started_at, remaining_tasks, remaining_deps} is
    made from the arguments - what the stored state holds;
  * one message per task {"flow_slug", "run_id", "step_slug", "task_index"} goes to queue_names[i], delayed by
    start_delays[i] seconds, with one pgmq.send_batch call per (queue, delay) for all the steps together, and one
    'queued' step_tasks row per message is written with its message_id and that queue_name (task_index 0 ..
    task_counts[i]-1, paired with the message carrying that index); no queue is created here (no DDL);
  * after each (queue, delay) group, pgflow._wake_queue wakes the queue's workers (undelayed) or announces when
    the messages become visible (delayed);
  * empty or NULL arrays do nothing. The arrays are paired by position and must be equally long.
Used by pgflow._start_ready_steps_batch after it chose the steps, and by pgflow.start_flows for the root steps it
inserted 'started' (it knows their fields without reading them back).
$doc$;
-- end generated

-- generated from sql/core: 0100_function__start_ready_steps_batch.sql
create or replace function pgflow._start_ready_steps_batch(
  run_ids            uuid[],
  started_run_ids    uuid[] default null,
  started_step_slugs text[] default null
)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_runs   uuid[];
  v_slugs  text[];
  v_flows  text[];
  v_queues text[];
  v_delays integer[];
  v_counts integer[];
  v_live   uuid[];
begin
  if coalesce(cardinality(_start_ready_steps_batch.run_ids), 0) = 0
     and coalesce(cardinality(_start_ready_steps_batch.started_run_ids), 0) = 0 then
    return;
  end if;

  -- Every table is filtered with "= any (array)" on its key, never joined to a set of ids: with statistics that
  -- do not know a backlog of thousands of started runs, a join can turn into a nested loop over all of them.
  -- "(status = ...) is true" keeps the status test out of the index conditions: the run is looked up by its primary
  -- key, never through idx_runs_status, which statistics taken while few runs were started make look cheaper and
  -- which then reads every started run for each id.
  v_live := array(
    select r.run_id from pgflow.runs as r
     where r.run_id = any (_start_ready_steps_batch.run_ids) and (r.status = 'started') is true);

  with started as (
    update pgflow.step_states as ss
       set status = 'started',
           started_at = now(),
           remaining_tasks = ss.initial_tasks
     where ss.run_id = any (v_live)
       and ss.status = 'created'
       and ss.remaining_deps = 0
       and ss.initial_tasks > 0
    returning ss.flow_slug, ss.run_id, ss.step_slug, ss.initial_tasks
  ),
  already_started as (
    -- One primary-key lookup per pair (LIMIT keeps the planner from turning the lookups into a join).
    select ss.*
      from unnest(_start_ready_steps_batch.started_run_ids, _start_ready_steps_batch.started_step_slugs)
             as k (run_id, step_slug)
      cross join lateral (
        select x.flow_slug, x.run_id, x.step_slug, x.initial_tasks
          from pgflow.step_states as x
         where x.run_id = k.run_id and x.step_slug = k.step_slug
         limit 1) as ss
  ),
  steps as (
    -- Each state's step by key (LIMIT keeps it a lookup): as a join, a plan of nested loops may read every step of
    -- every flow and scan the states again for each one.
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
      from (select * from started union all select * from already_started) as st
      cross join lateral (
        select s.step_index, s.queue_name, s.opt_start_delay from pgflow.steps as s
         where s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
         limit 1) as s
  )
  select array_agg(x.run_id order by x.run_id, x.step_index),
         array_agg(x.step_slug order by x.run_id, x.step_index),
         array_agg(x.flow_slug order by x.run_id, x.step_index),
         array_agg(x.queue_name order by x.run_id, x.step_index),
         array_agg(x.start_delay order by x.run_id, x.step_index),
         array_agg(x.initial_tasks order by x.run_id, x.step_index)
    into v_runs, v_slugs, v_flows, v_queues, v_delays, v_counts
    from steps as x;

  if v_runs is null then
    return;
  end if;
  perform pgflow._send_step_tasks(v_runs, v_slugs, v_flows, v_queues, v_delays, v_counts);
end;
$$;

comment on function pgflow._start_ready_steps_batch(run_ids uuid[], started_run_ids uuid[], started_step_slugs text[]) is $doc$
pgflow._start_ready_steps_batch(run_ids, started_run_ids, started_step_slugs) guarantees: for every run of run_ids
exactly what pgflow.start_ready_steps(run_id) guarantees, done set-based:
  * only runs that are 'started' are touched; NULL or empty run_ids do nothing;
  * every step state of those runs that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes
    'started' (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently
    (one UPDATE starts them all);
  * step:started is emitted per started step, ordered by run_id, then step_index;
  * one message per task {"flow_slug", "run_id", "step_slug", "task_index"} goes to the step's queue
    (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), with one pgmq.send_batch call
    per (queue, delay) for all the runs together, and one 'queued' step_tasks row per message is written with
    its message_id and that queue_name (task_index 0 .. initial_tasks-1, paired with the message carrying that
    index); no queue is created here (no DDL);
  * after sending undelayed messages to a queue, pgflow._wake_queue wakes its workers with payload '': one alive
    worker of the queue on 'pgflow:w:<worker_id>' (v0.20.0), or every listener of 'pgflow:queue:<queue_name>'
    when the queue has none (at commit; identical notifications of a transaction are folded); after sending
    delayed ones, pgflow._wake_queue (pgflow._notify_queue_visible_at) announces when they become visible, one {"visible_at": ...} per
    queue and delay (v0.20.0);
  * steps with initial_tasks NULL or 0 are never started here, and conditions are not evaluated here (as in
    start_ready_steps);
  * the step states named by the pairs (started_run_ids[i], started_step_slugs[i]) were made 'started' by the
    caller in this transaction (in the same row version that made them ready, one row version fewer than
    'created' -> ready -> 'started'): they get exactly what a step started here gets - its step:started event in
    the same order, its messages and tasks - and are not updated again. NULL arrays name none.
$doc$;
-- end generated

-- Roles that may start ready steps (pgflow._start_ready_steps_batch: whoever starts runs or completes tasks) may
-- send the started steps' tasks, which it and start_flows now do through pgflow._send_step_tasks.
select pg_temp.pgflow_v020_grant_with('pgflow._start_ready_steps_batch(uuid[],uuid[],text[])',
  'pgflow._send_step_tasks(uuid[], text[], text[], text[], integer[], integer[])');

-- generated from sql/core: 0100_function_add_step.sql
create or replace function pgflow.add_step(
  flow_slug               text,
  step_slug               text,
  deps_slugs              text[]  default '{}',
  max_attempts            integer default null,
  base_delay              integer default null,
  timeout                 integer default null,
  start_delay             integer default null,
  step_type               text    default 'single',
  required_input_pattern  jsonb   default null,
  forbidden_input_pattern jsonb   default null,
  when_unmet              text    default 'skip',
  when_exhausted          text    default 'fail'
)
returns pgflow.steps
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_deps          text[];
  v_existing_deps text[];
  v_step          pgflow.steps;
  v_mode          text;
  v_index         int;
  v_queue         text;
  v_listed        text;
begin
  -- Distinct dependencies, first occurrence order kept (used in messages).
  select coalesce(array_agg(u.dep order by u.first_pos), '{}')
  into v_deps
  from (
    select d.dep, min(d.pos) as first_pos
    from unnest(coalesce(add_step.deps_slugs, '{}'::text[])) with ordinality as d(dep, pos)
    group by d.dep
  ) as u;

  if array_position(v_deps, null) is not null then
    raise exception using
      errcode = '22004',
      message = format('Step "%s" of flow "%s": deps_slugs must not contain NULL (got %s)',
        add_step.step_slug, add_step.flow_slug, add_step.deps_slugs);
  end if;

  if coalesce(add_step.step_type, 'single') = 'map' and cardinality(v_deps) > 1 then
    raise exception 'Map step "%" can have at most one dependency, but % were provided: %',
      add_step.step_slug, cardinality(v_deps), array_to_string(v_deps, ', ');
  end if;

  -- Serialise definitions of one flow, so concurrent calls neither race for a step_index nor insert one step
  -- twice. An unknown flow locks nothing and fails below on steps_flow_slug_fkey.
  select f.queue_mode into v_mode from pgflow.flows as f where f.flow_slug = add_step.flow_slug for update;

  select s.* into v_step
  from pgflow.steps as s
  where s.flow_slug = add_step.flow_slug
    and s.step_slug = add_step.step_slug;

  if found then
    select coalesce(array_agg(d.dep_slug order by d.dep_slug collate "C"), '{}')
    into v_existing_deps
    from pgflow.deps as d
    where d.flow_slug = add_step.flow_slug
      and d.step_slug = add_step.step_slug;

    if v_existing_deps is distinct from
       (select coalesce(array_agg(x.dep order by x.dep collate "C"), '{}') from unnest(v_deps) as x(dep)) then
      raise exception using
        errcode = '23514',
        message = format(
          'Step "%s" of flow "%s" already exists with dependencies [%s]; add_step cannot change them to [%s]',
          add_step.step_slug, add_step.flow_slug,
          array_to_string(v_existing_deps, ', '), array_to_string(v_deps, ', ')),
        hint = 'Dependencies are fixed when a step is created; delete the flow (pgflow.delete_flow_and_data) and define it again.';
    end if;

    -- Like create_flow for a default queue: a step queue that went missing is created again.
    if v_mode = 'step'
       and not exists (select 1 from pgmq.list_queues() as q where lower(q.queue_name) = v_step.queue_name) then
      perform pgmq.create(v_step.queue_name);
    end if;
    return v_step;
  end if;

  select coalesce(max(s2.step_index) + 1, 0) into v_index
    from pgflow.steps as s2 where s2.flow_slug = add_step.flow_slug;

  if v_mode = 'step' and pgflow.is_valid_slug(add_step.step_slug) then
    perform pgflow._check_step_mode_slug(add_step.step_slug, 'Step', add_step.flow_slug, null);
    if exists (select 1 from pgflow.steps as s2
                where s2.flow_slug = add_step.flow_slug and lower(s2.step_slug) = lower(add_step.step_slug)) then
      raise exception using
        errcode = '23505',
        message = format(
          'Step slug "%s" of flow "%s" differs only in letter case from step "%s"; with per-step queues both would use queue "%s"',
          add_step.step_slug, add_step.flow_slug,
          (select s2.step_slug from pgflow.steps as s2
            where s2.flow_slug = add_step.flow_slug and lower(s2.step_slug) = lower(add_step.step_slug) limit 1),
          pgflow._step_queue_name(add_step.flow_slug, add_step.step_slug, v_index)),
        hint = 'Rename one of the steps.';
    end if;
    v_queue := pgflow._step_queue_name(add_step.flow_slug, add_step.step_slug, v_index);
    if length(v_queue) > 47 then
      raise exception using
        errcode = '22023',
        message = format('Step "%s" of flow "%s": its queue name "%s" is %s characters long; PGMQ allows at most 47',
          add_step.step_slug, add_step.flow_slug, v_queue, length(v_queue)),
        hint = 'Choose a shorter flow slug.';
    end if;
    perform pgmq.validate_queue_name(v_queue);
    -- The queue's name is locked like a flow slug (create_flow locks lower(flow_slug), the name of a default
    -- queue), so a flow created at the same time with the same default queue name waits, then sees this queue.
    perform pg_advisory_xact_lock(1, hashtext(v_queue));
    select string_agg(format('"%s"', q.queue_name), ', ' order by q.queue_name) into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue;
    if v_listed is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Cannot add step "%s" to flow "%s": PGMQ already lists queue %s, the name of the step''s private queue',
          add_step.step_slug, add_step.flow_slug, v_listed),
        hint = 'pgflow manages its queues exclusively and never adopts a queue it did not create for this step (it may be the queue of a flow named like it). Rename the flow or the step.';
    end if;
  else
    v_queue := pgflow._default_queue_name(add_step.flow_slug);
  end if;

  insert into pgflow.steps as s (
    flow_slug, step_slug, step_type, step_index, deps_count,
    opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay,
    required_input_pattern, forbidden_input_pattern, when_unmet, when_exhausted, queue_name
  )
  values (
    add_step.flow_slug,
    add_step.step_slug,
    coalesce(add_step.step_type, 'single'),
    v_index,
    cardinality(v_deps),
    add_step.max_attempts,
    add_step.base_delay,
    add_step.timeout,
    add_step.start_delay,
    add_step.required_input_pattern,
    add_step.forbidden_input_pattern,
    add_step.when_unmet,
    add_step.when_exhausted,
    v_queue
  )
  returning s.* into v_step;

  if v_mode = 'step' then
    perform pgmq.create(v_queue);
  end if;

  insert into pgflow.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, d.dep, add_step.step_slug
  from unnest(v_deps) with ordinality as d(dep, pos)
  order by d.pos;

  return v_step;
end;
$$;

comment on function pgflow.add_step(flow_slug text, step_slug text, deps_slugs text[], max_attempts integer, base_delay integer, timeout integer, start_delay integer, step_type text, required_input_pattern jsonb, forbidden_input_pattern jsonb, when_unmet text, when_exhausted text) is $doc$
pgflow.add_step(...) guarantees:
  * definitions of one flow are serialised by a row lock on the flow;
  * idempotent by (flow_slug, step_slug): the first call inserts the step at the next step_index of the flow
    (0, 1, 2, ... in call order, a topological order because dependencies must already exist) with its
    dependency edges; a later call with the same dependency set returns the existing row unchanged (options,
    type, patterns and modes are NOT updated);
  * a later call with a different dependency set is rejected and changes nothing: adding edges to an existing
    step would leave deps_count stale (runs would never start the step) and could create cycles;
  * duplicate names in deps_slugs count once, so deps_count always equals the number of edges; NULL = '{}';
  * a new step records its resolved route. In queue mode 'flow': the flow's default queue,
    pgflow._default_queue_name(flow_slug) (the queue create_flow created); no queue is created here. In queue
    mode 'step' (v0.20.0): its private queue pgflow._step_queue_name(flow_slug, step_slug, step_index), created
    here with pgmq.create in the caller's transaction; before anything is written the step slug must pass
    pgflow._check_step_mode_slug, must not differ only in letter case from another step of the flow (23505),
    the name must fit 47 characters (22023), and PGMQ must not list a queue of that name already (23505; pgflow
    never adopts a queue). The name is locked like a flow slug (advisory lock (1, hashtext(name))), so it cannot
    race a flow whose default queue has that name. A later call for an existing step of such a flow re-creates
    its queue only when PGMQ lists none;
  * a map step has at most one dependency;
  * everything else is enforced by the constraints of steps and deps, whose error texts callers match on
    (steps_flow_slug_fkey, deps_flow_slug_dep_slug_fkey, deps_check, steps_step_slug_check,
    steps_step_type_check, when_unmet_is_valid, when_exhausted_is_valid, opt_*_is_*, *_input_pattern_is_object).
$doc$;
-- end generated

-- generated from sql/core: 0100_function_cancel_run.sql
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
-- end generated

-- generated from sql/core: 0100_function_cascade_resolve_conditions.sql
create or replace function pgflow.cascade_resolve_conditions(run_id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run        record;
  v_iteration  integer := 0;
  v_fail_slug  text;
  v_skip       text[];
  v_cascade    text[];
  v_skipped    text[];
  v_slug       text;
  v_step       record;
  v_status     text;
begin
  select r.flow_slug, r.status, r.input into v_run
    from pgflow.runs as r
   where r.run_id = cascade_resolve_conditions.run_id;
  if not found or v_run.status = 'completed' then
    return true;
  elsif v_run.status in ('failed', 'cancelled') then
    return false;
  end if;

  loop
    v_iteration := v_iteration + 1;
    if v_iteration > 50 then
      raise exception 'cascade_resolve_conditions exceeded safety limit of 50 iterations (run %)',
        cascade_resolve_conditions.run_id;
    end if;

    with candidates as (
      select ss.step_slug,
             s.step_index,
             s.when_unmet,
             s.required_input_pattern,
             s.forbidden_input_pattern,
             case
               when s.deps_count = 0 then v_run.input
               else coalesce(
                 (select jsonb_object_agg(d.dep_slug, dss.output)
                    from pgflow.deps as d
                    join pgflow.step_states as dss
                      on dss.run_id = ss.run_id and dss.step_slug = d.dep_slug
                   where d.flow_slug = ss.flow_slug
                     and d.step_slug = ss.step_slug
                     and dss.status = 'completed'),
                 '{}'::jsonb)
             end as condition_input
        from pgflow.step_states as ss
        join pgflow.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and (s.required_input_pattern is not null or s.forbidden_input_pattern is not null)
    ),
    unmet as (
      select c.*
        from candidates as c
       where not (
               (c.required_input_pattern is null or c.condition_input @> c.required_input_pattern)
           and (c.forbidden_input_pattern is null or not (c.condition_input @> c.forbidden_input_pattern)))
    )
    select (select u.step_slug from unmet as u where u.when_unmet = 'fail' order by u.step_index limit 1),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip' order by u.step_index),
           array(select u.step_slug from unmet as u where u.when_unmet = 'skip-cascade' order by u.step_index)
      into v_fail_slug, v_skip, v_cascade;

    -- Phase fail: one unmet 'fail' condition fails the step and the whole run.
    if v_fail_slug is not null then
      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = 'Condition not met'
       where ss.run_id = cascade_resolve_conditions.run_id
         and ss.step_slug = v_fail_slug
      returning ss.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'error_message', v_step.error_message,
          'failed_at', v_step.failed_at),
        'step:' || v_step.step_slug || ':failed',
        v_step.run_id);

      -- The rest of the run will not run: unfinished steps skipped, unfinished tasks cancelled, messages archived.
      perform pgflow._finish_run_steps(cascade_resolve_conditions.run_id, 'run_failed');

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = cascade_resolve_conditions.run_id
      returning r.* into v_step;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'status', v_step.status,
          'error_message', 'Condition not met',
          'failed_at', v_step.failed_at),
        'run:failed',
        v_step.run_id);

      return false;
    end if;

    -- Phase skip: skip the steps, release their dependents.
    v_skipped := '{}';
    if cardinality(v_skip) > 0 then
      for v_step in
        with skipped as (
          update pgflow.step_states as ss
             set status = 'skipped',
                 skip_reason = 'condition_unmet',
                 skipped_at = now()
           where ss.run_id = cascade_resolve_conditions.run_id
             and ss.step_slug = any (v_skip)
             and ss.status = 'created'
          returning ss.*
        )
        select sk.*, s.step_index
          from skipped as sk
          join pgflow.steps as s on s.flow_slug = sk.flow_slug and s.step_slug = sk.step_slug
         order by s.step_index
      loop
        v_skipped := v_skipped || v_step.step_slug;
        perform pgflow._emit_event(
          jsonb_build_object(
            'event_type', 'step:skipped',
            'run_id', v_step.run_id,
            'flow_slug', v_step.flow_slug,
            'step_slug', v_step.step_slug,
            'status', v_step.status,
            'skip_reason', v_step.skip_reason,
            'skipped_at', v_step.skipped_at),
          'step:' || v_step.step_slug || ':skipped',
          v_step.run_id);
      end loop;

      if cardinality(v_skipped) > 0 then
        update pgflow.step_states as child
           set remaining_deps = child.remaining_deps - parents.n,
               initial_tasks = case
                                 when parents.step_type = 'map' and parents.deps_count = 1
                                      and child.status = 'created' then 0
                                 else child.initial_tasks
                               end
          from (
            select d.step_slug, s.step_type, s.deps_count, count(*)::integer as n
              from pgflow.deps as d
              join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
             where d.flow_slug = v_run.flow_slug
               and d.dep_slug = any (v_skipped)
             group by d.step_slug, s.step_type, s.deps_count
          ) as parents
         where child.run_id = cascade_resolve_conditions.run_id
           and child.step_slug = parents.step_slug;

        update pgflow.runs as r
           set remaining_steps = r.remaining_steps - cardinality(v_skipped)
         where r.run_id = cascade_resolve_conditions.run_id;
      end if;
    end if;

    -- Phase skip-cascade: skip the step and everything downstream of it.
    foreach v_slug in array v_cascade loop
      perform pgflow._cascade_force_skip_steps(cascade_resolve_conditions.run_id, v_slug, 'condition_unmet');
    end loop;

    select r.status into v_status from pgflow.runs as r where r.run_id = cascade_resolve_conditions.run_id;
    if v_status <> 'started' then
      return v_status not in ('failed', 'cancelled');
    end if;

    exit when cardinality(v_skipped) = 0;
  end loop;

  return true;
end;
$$;

comment on function pgflow.cascade_resolve_conditions(run_id uuid) is $doc$
pgflow.cascade_resolve_conditions(run_id) guarantees: the if/ifNot conditions of every step of the run that is
'created' with remaining_deps 0 and has a pattern are evaluated, repeatedly until nothing changes:
  * condition input: the run input for steps without dependencies, otherwise {<dep_slug>: <output>} over the
    dependencies that completed (skipped ones are absent); met <=> (required pattern NULL or input @> it) and
    (forbidden pattern NULL or not input @> it);
  * when_unmet 'fail': the unmet step with the lowest step_index fails ('Condition not met'), the run fails,
    step:failed is emitted, pgflow._finish_run_steps(run_id, 'run_failed') skips the run's other unfinished
    steps, cancels its unfinished tasks and archives their messages, run:failed is emitted last, and the function
    returns false (only that one step is failed);
  * when_unmet 'skip': the step is skipped (condition_unmet, step:skipped emitted in step_index order), its
    dependents' remaining_deps drop, map dependents get initial_tasks 0, the run's remaining_steps drops;
  * when_unmet 'skip-cascade': pgflow._cascade_force_skip_steps(run_id, step, 'condition_unmet'), in step_index
    order;
  * returns false when the run is (or becomes) 'failed' or is 'cancelled', true otherwise (also for 'completed' and unknown runs,
    where nothing is evaluated). More than 50 rounds raise
    'cascade_resolve_conditions exceeded safety limit of 50 iterations (run <run_id>)'.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_create_flow.sql
create or replace function pgflow.create_flow(
  flow_slug         text,
  max_attempts      integer default null,
  base_delay        integer default null,
  timeout           integer default null,
  queue_mode        text    default null,
  message_retention text    default null
)
returns pgflow.flows
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow   pgflow.flows;
  v_queue  text := pgflow._default_queue_name(create_flow.flow_slug);
  v_listed text;
  v_mode   text := coalesce(create_flow.queue_mode, 'flow');
  v_retention text := coalesce(create_flow.message_retention, 'archive');
begin
  if v_mode not in ('flow', 'step') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": queue_mode must be ''flow'' or ''step'', got ''%s''', create_flow.flow_slug, v_mode);
  end if;
  if v_retention not in ('archive', 'delete') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": message_retention must be ''archive'' or ''delete'', got ''%s''',
        create_flow.flow_slug, v_retention);
  end if;
  -- An invalid slug goes straight to the insert below, which rejects it on the slug_is_valid constraint.
  if pgflow.is_valid_slug(create_flow.flow_slug) then
    if length(create_flow.flow_slug) > 47 then
      raise exception using
        errcode = '22023',
        message = format(
          'Flow slug "%s" is %s characters long, but a flow slug also names the flow''s PGMQ queue, which allows at most 47',
          create_flow.flow_slug, length(create_flow.flow_slug)),
        hint = 'Choose a flow slug of at most 47 characters.';
    end if;
    perform pgmq.validate_queue_name(v_queue);
    if v_mode = 'step' then
      perform pgflow._check_step_mode_slug(create_flow.flow_slug, 'Flow', create_flow.flow_slug, 40);
    end if;

    perform pg_advisory_xact_lock(1, hashtext(lower(create_flow.flow_slug)));

    select f.* into v_flow from pgflow.flows as f where f.flow_slug = create_flow.flow_slug;
    if found then
      if v_flow.queue_mode = 'flow'
         and not exists (select 1 from pgmq.list_queues() as q where lower(q.queue_name) = v_queue) then
        perform pgmq.create(v_queue);
      end if;
      return v_flow;
    end if;

    select string_agg(format('"%s"', q.queue_name), ', ' order by q.queue_name) into v_listed
      from pgmq.list_queues() as q
     where lower(q.queue_name) = v_queue;
    if v_listed is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Cannot create flow "%s": PGMQ already lists queue %s, which has the same normalized name "%s" as the flow''s queue',
          create_flow.flow_slug, v_listed, v_queue),
        hint = 'pgflow manages its queues exclusively and never adopts a queue it did not create for this flow (it may be another flow''s queue whose slug differs only in letter case). Choose another flow slug.';
    end if;
  end if;

  insert into pgflow.flows as f (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout, queue_mode,
                                 message_retention)
  values (
    create_flow.flow_slug,
    coalesce(create_flow.max_attempts, 3),
    coalesce(create_flow.base_delay, 5),
    coalesce(create_flow.timeout, 60),
    v_mode,
    v_retention
  )
  returning f.* into v_flow;

  if v_mode = 'flow' then
    perform pgmq.create(v_queue);
  end if;

  return v_flow;
end;
$$;

comment on function pgflow.create_flow(flow_slug text, max_attempts integer, base_delay integer, timeout integer, queue_mode text, message_retention text) is $doc$
pgflow.create_flow(flow_slug, max_attempts, base_delay, timeout, queue_mode, message_retention) guarantees:
  * idempotent: the first call inserts the flow (NULL options become max_attempts 3, base_delay 5, timeout 60,
    queue_mode 'flow', message_retention 'archive'); later calls return the existing row unchanged (options,
    queue_mode and message_retention are NOT updated; ensure_flow_compiled reports a different queue mode as a
    difference and sets a different message retention in place);
  * message_retention (v0.20.0) 'archive' or 'delete' (flows.message_retention: whether a task's message is
    archived when the task finishes or deleted when a worker claims it); anything else is refused (22023) before
    anything is written;
  * queue_mode 'flow' (the default): the flow's default PGMQ queue, pgflow._default_queue_name(flow_slug) (the
    lower-case slug), exists afterwards, also for a flow without steps; an existing flow reuses the queue PGMQ
    lists under any spelling of that name (a mixed-case queue created by v0.16.0 stays as it is) and gets it
    re-created only when PGMQ lists none;
  * queue_mode 'step' (v0.20.0): no queue is created (add_step creates each step's private queue); the slug must
    also satisfy the per-step naming rules of pgflow._check_step_mode_slug (at most 40 characters, no leading or
    trailing '_', no '__'), checked before anything is written; the default queue name stays reserved for the
    flow (flows_default_queue_key); any other queue_mode is refused (22023);
  * a new flow is refused, before anything is written, when PGMQ already lists a queue with the same normalized
    name (pgflow manages its queues exclusively and never adopts a queue it did not create for that flow);
  * two flows never share a default queue: the unique index flows_default_queue_key rejects a slug that
    differs only in letter case from an existing flow, atomically (also for concurrent calls);
  * a valid slug whose queue name would break PGMQ's limit (more than 47 characters) is rejected before anything
    is written, and the queue name passes PGMQ's public validation (pgmq.validate_queue_name);
  * calls for one normalized slug are serialised with ensure_flow_compiled and delete_flow_and_data by the
    transaction-level advisory lock (1, hashtext(lower(flow_slug)));
  * invalid slugs and options fail on the flows CHECK constraints (slug_is_valid, opt_*). Queues are only
    created and listed through PGMQ's public functions.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_complete_task.sql
create or replace function pgflow.complete_task(
  run_id     uuid,
  step_slug  text,
  task_index integer,
  output     jsonb,
  attempt    integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run         pgflow.runs;
  v_state       pgflow.step_states;
  v_task        pgflow.step_tasks;
  v_step        pgflow.steps;
  v_child       text;
  v_type        text;
  v_step_output jsonb;
  v_output_len  integer;
begin
  select r.* into v_run from pgflow.runs as r where r.run_id = complete_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- A report from an attempt that is no longer current changes nothing.
  if complete_task.attempt is not null
     and (v_task.status <> 'started' or v_task.attempts_count <> complete_task.attempt) then
    return next v_task;
    return;
  end if;

  -- Failed or cancelled run: nothing to do (its unfinished tasks were cancelled, their messages archived).
  if v_run.status in ('failed', 'cancelled') then
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Only a started task can complete.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select s.* into v_step
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug and s.step_slug = complete_task.step_slug;

  -- A single step feeding a map must produce an array.
  if v_step.step_type = 'single' and jsonb_typeof(complete_task.output) is distinct from 'array' then
    select c.step_slug into v_child
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
      join pgflow.step_states as cs on cs.run_id = complete_task.run_id and cs.step_slug = c.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and c.step_type = 'map'
       and cs.status = 'created'
       and cs.initial_tasks is null
     order by c.step_index
     limit 1;

    if v_child is not null then
      v_type := coalesce(jsonb_typeof(complete_task.output), 'null');

      update pgflow.step_tasks as t
         set status = 'failed',
             failed_at = now(),
             output = complete_task.output,
             error_message = format('[TYPE_VIOLATION] Produced %s instead of array', v_type)
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.task_index = complete_task.task_index
      returning t.* into v_task;

      if v_task.message_id is not null then
        perform pgmq.archive(v_task.queue_name, v_task.message_id);
      end if;

      update pgflow.step_states as ss
         set status = 'failed',
             failed_at = now(),
             error_message = format('[TYPE_VIOLATION] Map step %s expects array input but dependency %s produced %s',
                                    v_child, complete_task.step_slug, v_type)
       where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
      returning ss.* into v_state;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:failed',
          'run_id', v_state.run_id,
          'flow_slug', v_state.flow_slug,
          'step_slug', v_state.step_slug,
          'status', v_state.status,
          'error_message', v_state.error_message,
          'failed_at', v_state.failed_at),
        'step:' || v_state.step_slug || ':failed',
        v_state.run_id);

      -- The rest of the run will not run: unfinished steps skipped, unfinished tasks cancelled, messages archived.
      perform pgflow._finish_run_steps(complete_task.run_id, 'run_failed');

      update pgflow.runs as r
         set status = 'failed',
             failed_at = now()
       where r.run_id = complete_task.run_id
      returning r.* into v_run;

      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'run:failed',
          'run_id', v_run.run_id,
          'flow_slug', v_run.flow_slug,
          'status', v_run.status,
          'error_message', v_state.error_message,
          'failed_at', v_run.failed_at),
        'run:failed',
        v_run.run_id);

      return next v_task;
      return;
    end if;
  end if;

  -- Complete the task.
  update pgflow.step_tasks as t
     set status = 'completed',
         completed_at = now(),
         output = complete_task.output
   where t.run_id = complete_task.run_id
     and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
  returning t.* into v_task;

  update pgflow.step_states as ss
     set remaining_tasks = ss.remaining_tasks - 1
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
  returning ss.* into v_state;

  if v_state.remaining_tasks = 0 then
    if v_step.step_type = 'map' then
      select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb) into v_step_output
        from pgflow.step_tasks as t
       where t.run_id = complete_task.run_id
         and t.step_slug = complete_task.step_slug
         and t.status = 'completed';
    else
      v_step_output := complete_task.output;
    end if;

    update pgflow.step_states as ss
       set status = 'completed',
           completed_at = now(),
           output = v_step_output
     where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug
    returning ss.* into v_state;

    -- Not computed inside the CASE below: the planner may fold a CASE arm with constant arguments even when the
    -- arm is never taken, and jsonb_array_length raises on a non-array.
    if jsonb_typeof(v_step_output) = 'array' then
      v_output_len := jsonb_array_length(v_step_output);
    end if;

    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and cs.initial_tasks is null then v_output_len
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = complete_task.step_slug
       and cs.run_id = complete_task.run_id
       and cs.step_slug = d.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - 1
     where r.run_id = complete_task.run_id;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:completed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'output', v_state.output,
        'completed_at', v_state.completed_at),
      'step:' || v_state.step_slug || ':completed',
      v_state.run_id);

    if not pgflow.cascade_resolve_conditions(complete_task.run_id) then
      if v_task.message_id is not null then
        perform pgmq.archive(v_task.queue_name, v_task.message_id);
      end if;
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(complete_task.run_id);
  end if;

  if v_task.message_id is not null then
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end if;

  perform pgflow.start_ready_steps(complete_task.run_id);
  perform pgflow.maybe_complete_run(complete_task.run_id);

  return next v_task;
end;
$$;

comment on function pgflow.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb, attempt integer) is $doc$
pgflow.complete_task(run_id, step_slug, task_index, output, attempt) guarantees (returns the task row; none if
unknown):
  * attempt fencing (v0.20.0): when attempt is given and the task is not 'started' or its attempts_count is not
    attempt, the report comes from an attempt that is no longer current: nothing changes at all (no message is
    touched) and the row is returned as it is, so the caller sees that its result was not recorded. A NULL
    attempt (pgflow's four-argument call) is not fenced;
  * rows are locked in the order run, step state, task (the same order as fail_task and requeue_stalled_tasks),
    so concurrent callbacks of one run are serialised and never deadlock each other;
  * failed or cancelled run: nothing changes (its unfinished tasks were cancelled and their messages archived
    when it ended);
  * step not 'started' (late or replayed callback: completed, skipped, failed): this task's message is archived,
    nothing else changes;
  * task not 'started' (queued, completed, failed): nothing changes at all, no message is touched and no type
    check runs (upstream pgflow failed the run on a bad output even for a never-started task);
  * type violation: a single step that has a dependent map still waiting for its array ('created',
    initial_tasks NULL; a map already skipped needs no array) and produced anything but a JSON array (SQL NULL
    included) fails the task ('[TYPE_VIOLATION] Produced <type> instead of array', output stored, message
    archived) and the step ('[TYPE_VIOLATION] Map step <child> expects array input but dependency <step>
    produced <type>', step:failed), then pgflow._finish_run_steps(run_id, 'run_failed') skips the run's
    unfinished steps, cancels its unfinished tasks and archives their messages, and the run fails (run:failed,
    last, with the step's error_message); when_exhausted does not apply;
  * otherwise the task is completed with the output exactly as given, the step's remaining_tasks drops; on the
    last task the step completes with its output (single: the task output; map: the outputs of all its tasks
    as one array ordered by task_index), its dependents' remaining_deps drop, dependent maps learn their task
    count, the run's remaining_steps drops, step:completed is emitted, conditions are resolved, taskless steps
    cascade, ready steps start and the run completes when nothing is left;
  * the task's message is archived once the task is completed.
Every message operation uses the queue the task stored (step_tasks.queue_name): a single pgmq.archive call for
this task's message, one batch call per queue when the run's messages are archived.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_complete_tasks.sql
create or replace function pgflow.complete_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  task_indexes integer[],
  outputs      jsonb[],
  attempts     integer[] default null
)
returns table (task_position integer, task_status text, outcome text)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Generic plans: every statement finds its rows by key or by address, so one plan fits every batch, and a call
-- with a handful of tasks (a lone result) does not pay for planning each of its statements again (PL/pgSQL keeps
-- re-planning when a generic plan looks dearer than a small custom one: about 2.5 ms of CPU per call measured).
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_n         integer := coalesce(cardinality(complete_tasks.run_ids), 0);
  v_fast      integer[];
  v_slow      integer[];
  v_open_runs uuid[];
  v_events    jsonb[];
  v_cascaded  uuid[] := '{}';
  v_ready     uuid[];
  v_run_events jsonb[];
  v_run_id    uuid;
  v_queue     record;
  v_pos       integer;
  v_status    text;
  v_outcomes  text[];
  v_before    text[];
  v_c_steps   text[];
  v_c_flows   text[];
  v_c_outputs jsonb[];
  v_started_runs  uuid[];
  v_started_slugs text[];
  v_started_flows  text[];
  v_started_queues text[];
  v_started_delays integer[];
  v_started_counts integer[];
  v_children   integer;
  v_realtime   boolean;
  v_done_runs  uuid[];
  v_done_flows text[];
  v_c_runs     uuid[];
  v_dependents boolean;
  v_msg_ids    bigint[];
  v_msg_queues text[];
  v_queue_count integer;
  v_pair_flows text[];
  v_pair_steps text[];
  v_defs       jsonb;
begin
  if v_n <> coalesce(cardinality(complete_tasks.step_slugs), 0)
     or v_n <> coalesce(cardinality(complete_tasks.task_indexes), 0)
     or v_n <> coalesce(cardinality(complete_tasks.outputs), 0)
     or (complete_tasks.attempts is not null and v_n <> coalesce(cardinality(complete_tasks.attempts), 0)) then
    raise exception 'complete_tasks: the arrays differ in length: % run_ids, % step_slugs, % task_indexes, % outputs, % attempts',
      v_n, coalesce(cardinality(complete_tasks.step_slugs), 0), coalesce(cardinality(complete_tasks.task_indexes), 0),
      coalesce(cardinality(complete_tasks.outputs), 0),
      case when complete_tasks.attempts is null then 'no' else coalesce(cardinality(complete_tasks.attempts), 0)::text end
      using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;

  -- Lock order: runs, step states, tasks (as complete_task), each sorted, one key at a time (lateral lookups in key
  -- order). Every later statement finds its rows by key, one index lookup per row (this function plans nested
  -- loops only). An earlier version kept the locked rows' addresses and matched "ctid = any (addresses)", which a
  -- nested loop evaluates against every address for every row: 125,000 comparisons per batch of 500 map tasks.
  -- No statement joins step_states to steps by flow_slug either: with a generic plan's guess of a few rows, the
  -- planner reached the states through idx_step_states_flow_slug, reading every state of the flow for each
  -- completed task (135,000 rows per batch of 100 with 3,000 chain runs).
  -- One statement takes the three sets of locks, in that order: the arms of a UNION ALL run one after the other,
  -- each to its end (three statements paid a statement's fixed cost three times). It also yields the flow and
  -- step of every step state it locked, for the definitions below (FILTER, not WHERE: a condition outside the
  -- arms could be pushed into them and drop an arm's locks).
  select array_agg(locks.flow_slug) filter (where locks.flow_slug is not null),
         array_agg(locks.step_slug) filter (where locks.flow_slug is not null)
    into v_pair_flows, v_pair_steps
    from (
      select null::text as flow_slug, null::text as step_slug
        from (select distinct x.run_id from unnest(complete_tasks.run_ids) as x (run_id) order by x.run_id) as k
        cross join lateral (select from pgflow.runs as r where r.run_id = k.run_id for update) as l
      union all
      select l.flow_slug, l.step_slug
        from (select distinct x.run_id, x.step_slug
                from unnest(complete_tasks.run_ids, complete_tasks.step_slugs) as x (run_id, step_slug)
               order by x.run_id, x.step_slug) as k
        cross join lateral (
          select ss.flow_slug, ss.step_slug from pgflow.step_states as ss
           where ss.run_id = k.run_id and ss.step_slug = k.step_slug
             for update) as l
      union all
      select null, null
        from (select distinct x.run_id, x.step_slug, x.task_index
                from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
                       as x (run_id, step_slug, task_index)
               order by x.run_id, x.step_slug, x.task_index) as k
        cross join lateral (
          select from pgflow.step_tasks as t
           where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
             for update) as l
    ) as locks;

  -- The definitions the statements below need, read once per call instead of once per task (v0.20.0: 10-20
  -- buffer accesses per task before, on the pages every worker reads, which two workers contend for). One JSON
  -- object, whose keys are found by binary search (no join of the tasks against the definitions, whatever their
  -- numbers; slugs have no spaces):
  --   '<flow>'        [whether the flow has a step with a condition pattern,
  --                    its steps that have dependents, as the keys of an object];
  --   '<flow> <step>' for each step with a task in this call: [step_type, step_index,
  --                    its dependents as [slug, step_type, step_index, queue_name, start delay] ordered by slug,
  --                    whether one of them is a map].
  select coalesce(jsonb_object_agg(d.k, d.v), '{}')
    into v_defs
    from (
      select p.flow_slug || ' ' || p.step_slug as k,
             jsonb_build_array(s.step_type, s.step_index, coalesce(ch.dependents, '[]'),
                               coalesce(ch.map_dependent, false)) as v
        from (select distinct x.flow_slug, x.step_slug
                from unnest(v_pair_flows, v_pair_steps) as x (flow_slug, step_slug)) as p
        cross join lateral (
          select s.step_type, s.step_index from pgflow.steps as s
           where s.flow_slug = p.flow_slug and s.step_slug = p.step_slug limit 1) as s
        cross join lateral (
          select jsonb_agg(jsonb_build_array(d.step_slug, c.step_type, c.step_index, c.queue_name,
                                             coalesce(c.opt_start_delay, 0)) order by d.step_slug) as dependents,
                 bool_or(c.step_type = 'map') as map_dependent
            from pgflow.deps as d
            cross join lateral (
              select c.step_type, c.step_index, c.queue_name, c.opt_start_delay from pgflow.steps as c
               where c.flow_slug = d.flow_slug and c.step_slug = d.step_slug limit 1) as c
           where d.flow_slug = p.flow_slug and d.dep_slug = p.step_slug) as ch
      union all
      select f.flow_slug,
             jsonb_build_array(
               exists (
                 select 1
                   from pgflow.steps as cs
                  where cs.flow_slug = f.flow_slug
                    and (cs.required_input_pattern is not null or cs.forbidden_input_pattern is not null)),
               -- One scan of the flow's dependencies: the steps that are not leaves.
               coalesce((select jsonb_object_agg(d.dep_slug, true)
                           from pgflow.deps as d
                          where d.flow_slug = f.flow_slug), '{}'))
        from (select distinct x.flow_slug from unnest(v_pair_flows) as x (flow_slug)) as f
    ) as d;

  -- Sort out what cannot be recorded (unknown, duplicate, stale, no longer started) and split the rest into the
  -- plainly completable tasks and the others. A run with any task of the others has all its recordable tasks of
  -- this call completed one by one, so their order within the run is kept.
  select coalesce(array_agg(c.pos order by c.pos) filter (where c.pre_outcome is null and c.fast_run), '{}'),
         coalesce(array_agg(c.pos order by c.run_id, c.step_slug, c.task_index, c.pos)
                    filter (where c.pre_outcome is null and not c.fast_run), '{}'),
         array_agg(c.pre_outcome order by c.pos),
         array_agg(c.task_status order by c.pos)
    into v_fast, v_slow, v_outcomes, v_before
    from (
      select f.*, bool_and(f.fast) filter (where f.pre_outcome is null) over (partition by f.run_id) as fast_run
        from (
      select x.pos, x.run_id, x.step_slug, x.task_index, t.status as task_status,
             case
               when t.run_id is null then 'unknown'
               when x.pos <> min(x.pos) over (partition by x.run_id, x.step_slug, x.task_index) then 'duplicate'
               when x.attempt is not null and t.attempts_count <> x.attempt then 'stale'
               when x.attempt is not null and t.status <> 'started' then 'ignored'
             end as pre_outcome,
             coalesce(
               r.status = 'started'
               and ss.status = 'started'
               and t.status = 'started'
               and not (def.flow ->> 0)::boolean
               and not (
                 (def.step ->> 0) = 'single'
                 and jsonb_typeof(x.output) is distinct from 'array'
                 and (def.step ->> 3)::boolean
                 and exists (
                   select 1
                     from jsonb_array_elements(def.step -> 2) as c (d)
                     join pgflow.step_states as cst on cst.run_id = x.run_id and cst.step_slug = c.d ->> 0
                    where c.d ->> 1 = 'map'
                      and cst.status = 'created'
                      and cst.initial_tasks is null)),
               false) as fast
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs,
                    coalesce(complete_tasks.attempts, array_fill(null::integer, array[v_n])))
               with ordinality as x (run_id, step_slug, task_index, output, attempt, pos)
        -- One lookup per element for each row (LIMIT keeps each a lookup, whatever the plan's estimates).
        left join lateral (
          select r.flow_slug, r.status from pgflow.runs as r where r.run_id = x.run_id limit 1) as r on true
        left join lateral (
          select ss.status from pgflow.step_states as ss
           where ss.run_id = x.run_id and ss.step_slug = x.step_slug limit 1) as ss on true
        left join lateral (
          select t.run_id, t.status, t.attempts_count from pgflow.step_tasks as t
           where t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
           limit 1) as t on true
        -- The run's flow's and the step's definitions, found once per element.
        left join lateral (
          select v_defs -> r.flow_slug as flow, v_defs -> (r.flow_slug || ' ' || x.step_slug) as step offset 0) as def
          on true
        ) as f
    ) as c;

  if cardinality(v_fast) > 0 then
    -- Event payloads (JSON) are built only for realtime.send; the notifications are made from the fields.
    v_realtime := pgflow._trusted_realtime_send() is not null;

    -- The tasks, and their messages for the archive below (sorted by id; v_msg_queues pairs each with its queue).
    with updated as (
      update pgflow.step_tasks as t
         set status = 'completed',
             completed_at = now(),
             output = x.output
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes, complete_tasks.outputs)
               with ordinality as x (run_id, step_slug, task_index, output, pos)
       where x.pos = any (v_fast)
         and t.run_id = x.run_id
         and t.step_slug = x.step_slug
         and t.task_index = x.task_index
      returning t.queue_name, t.message_id
    )
    select array_agg(u.message_id order by u.message_id, u.queue_name) filter (where u.message_id is not null),
           array_agg(u.queue_name order by u.message_id, u.queue_name) filter (where u.message_id is not null),
           count(distinct u.queue_name) filter (where u.message_id is not null)
      into v_msg_ids, v_msg_queues, v_queue_count
      from updated as u;

    -- Their step states: remaining_tasks drops by the tasks completed; a step whose last task completed becomes
    -- 'completed' in the same row version, with its output (single: the task's output; map: all task outputs as
    -- one array ordered by task_index).
    with counts as (
      -- first_output: a single step's one task (index 0) completes in this call when the step does, so its output
      -- is here and need not be read back from step_tasks.
      select x.run_id, x.step_slug, count(*)::integer as n, (array_agg(x.output order by x.pos))[1] as first_output
        from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.outputs)
               with ordinality as x (run_id, step_slug, output, pos)
       where x.pos = any (v_fast)
       group by x.run_id, x.step_slug
    ),
    updated as (
      update pgflow.step_states as ss
         set remaining_tasks = ss.remaining_tasks - c.n,
             status = case when ss.remaining_tasks - c.n = 0 then 'completed' else ss.status end,
             completed_at = case when ss.remaining_tasks - c.n = 0 then now() else ss.completed_at end,
             output = case
                        when ss.remaining_tasks - c.n <> 0 then ss.output
                        when (v_defs -> (ss.flow_slug || ' ' || ss.step_slug) ->> 0) = 'map' then (
                          select coalesce(jsonb_agg(t.output order by t.task_index), '[]'::jsonb)
                            from pgflow.step_tasks as t
                           where t.run_id = ss.run_id and t.step_slug = ss.step_slug and t.status = 'completed')
                        else c.first_output
                      end
        from counts as c
       where ss.run_id = c.run_id
         and ss.step_slug = c.step_slug
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.output, ss.completed_at,
                (v_defs -> (ss.flow_slug || ' ' || ss.step_slug) ->> 1)::integer as step_index
    )
    select array_agg(u.run_id order by u.run_id, u.step_index),
           array_agg(u.step_slug order by u.run_id, u.step_index),
           array_agg(u.flow_slug order by u.run_id, u.step_index),
           array_agg(u.output order by u.run_id, u.step_index),
           array_agg(case when v_realtime then jsonb_build_object(
                       'event_type', 'step:completed',
                       'run_id', u.run_id,
                       'flow_slug', u.flow_slug,
                       'step_slug', u.step_slug,
                       'status', u.status,
                       'output', u.output,
                       'completed_at', u.completed_at) end order by u.run_id, u.step_index),
           -- Whether any completed step has dependents.
           coalesce(bool_or(jsonb_array_length(v_defs -> (u.flow_slug || ' ' || u.step_slug) -> 2) > 0), false)
      into v_c_runs, v_c_steps, v_c_flows, v_c_outputs, v_events, v_dependents
      from updated as u
     where u.status = 'completed';

    if v_c_runs is not null then
      -- Dependents of the completed steps: one dependency fewer per completed parent; a dependent map learns its
      -- task count from its parent's array. A dependent that becomes ready with tasks to run becomes 'started' in
      -- the same row version (these flows have no conditions to resolve first); its messages, tasks and
      -- step:started event follow below, with the other steps that start. The dependents are locked first (key
      -- order, as above). Completed leaf steps have none: then neither statement runs.
      v_children := 0;
      if v_dependents then
        select count(*)
          into v_children
          from (select distinct x.run_id, d.e ->> 0 as step_slug
                    from unnest(v_c_runs, v_c_steps, v_c_flows) as x (run_id, step_slug, flow_slug)
                    cross join lateral jsonb_array_elements(v_defs -> (x.flow_slug || ' ' || x.step_slug) -> 2) as d (e)
                   order by x.run_id, d.e ->> 0) as k
            cross join lateral (
              select from pgflow.step_states as cs
               where cs.run_id = k.run_id and cs.step_slug = k.step_slug
                 for update) as l;
      end if;
      if v_children > 0 then
        with upd as (
          update pgflow.step_states as cs
             set remaining_deps = cs.remaining_deps - p.n,
                 initial_tasks = case
                                   when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                   else cs.initial_tasks
                                 end,
                 status = case
                            when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                 and coalesce(case
                                                when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                else cs.initial_tasks
                                              end, 0) > 0
                            then 'started'
                            else cs.status
                          end,
                 started_at = case
                                when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                     and coalesce(case
                                                    when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                    else cs.initial_tasks
                                                  end, 0) > 0
                                then now()
                                else cs.started_at
                              end,
                 remaining_tasks = case
                                     when cs.status = 'created' and cs.remaining_deps - p.n = 0
                                          and coalesce(case
                                                         when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                                         else cs.initial_tasks
                                                       end, 0) > 0
                                     then case
                                            when p.child_type = 'map' and cs.initial_tasks is null then p.output_len
                                            else cs.initial_tasks
                                          end
                                     else cs.remaining_tasks
                                   end
            from (
              select x.run_id, d.e ->> 0 as child_slug, d.e ->> 1 as child_type, (d.e ->> 2)::integer as child_index,
                     d.e ->> 3 as child_queue, (d.e ->> 4)::integer as child_delay,
                     count(*)::integer as n,
                     max(case when jsonb_typeof(x.output) = 'array' then jsonb_array_length(x.output) end) as output_len
                from unnest(v_c_runs, v_c_steps, v_c_flows, v_c_outputs) as x (run_id, step_slug, flow_slug, output)
                -- Each completed step's dependents, from the definitions read above.
                cross join lateral jsonb_array_elements(v_defs -> (x.flow_slug || ' ' || x.step_slug) -> 2) as d (e)
               group by x.run_id, d.e
            ) as p
           where cs.run_id = p.run_id
             and cs.step_slug = p.child_slug
          returning cs.run_id, cs.step_slug, cs.flow_slug, cs.remaining_deps, cs.status, cs.initial_tasks,
                    p.child_index, p.child_queue, p.child_delay
        )
        -- The started dependents by run, then step_index (the order of their step:started events), with what
        -- _send_step_tasks needs to send their tasks without reading them back.
        select array_agg(distinct u.run_id) filter (where u.remaining_deps = 0 and u.status = 'created'),
               array_agg(u.run_id order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.step_slug order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.flow_slug order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.child_queue order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.child_delay order by u.run_id, u.child_index) filter (where u.status = 'started'),
               array_agg(u.initial_tasks order by u.run_id, u.child_index) filter (where u.status = 'started')
          into v_ready, v_started_runs, v_started_slugs, v_started_flows, v_started_queues, v_started_delays,
               v_started_counts
          from upd as u;
      end if;

      -- The runs: one step fewer per completed step. A run left without steps is complete (nothing can start
      -- or cascade in it any more): it becomes 'completed' in the same row version, with the outputs of its
      -- completed leaf steps, as maybe_complete_run does.
      with counts as (
        select x.run_id, count(*)::integer as n from unnest(v_c_runs) as x (run_id) group by x.run_id
      ),
      updated as (
        update pgflow.runs as r
           set remaining_steps = r.remaining_steps - c.n,
               status = case when r.remaining_steps - c.n = 0 then 'completed' else r.status end,
               completed_at = case when r.remaining_steps - c.n = 0 then now() else r.completed_at end,
               output = case
                          when r.remaining_steps - c.n <> 0 then r.output
                          else (
                            select jsonb_object_agg(ss.step_slug, ss.output)
                              from pgflow.step_states as ss
                             where ss.run_id = r.run_id
                               and ss.status = 'completed'
                               -- A leaf: no dependents (from the definitions of the run's flow, read above).
                               and coalesce(
                                     not (v_defs -> r.flow_slug -> 1) ? ss.step_slug,
                                     not exists (
                                       select 1 from pgflow.deps as d
                                        where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug)))
                        end
          from counts as c
         where r.run_id = c.run_id
        returning r.run_id, r.flow_slug, r.status, r.output, r.completed_at
      )
      select array_agg(u.run_id order by u.run_id) filter (where u.status <> 'completed'),
             array_agg(u.run_id order by u.run_id) filter (where u.status = 'completed'),
             array_agg(u.flow_slug order by u.run_id) filter (where u.status = 'completed'),
             array_agg(case when v_realtime then jsonb_build_object(
                         'event_type', 'run:completed',
                         'run_id', u.run_id,
                         'flow_slug', u.flow_slug,
                         'status', u.status,
                         'output', u.output,
                         'completed_at', u.completed_at) end order by u.run_id) filter (where u.status = 'completed')
        into v_open_runs, v_done_runs, v_done_flows, v_run_events
        from updated as u;

      -- One call for all events: every step:completed (by run, then step_index), then every run:completed, so
      -- each run's steps come before the run itself (no sort: sorting the payloads cost more than emitting them).
      -- The step slugs stop after the step events: the run events that follow have none.
      perform pgflow._emit_envelopes(
        array_fill('step:completed'::text, array[cardinality(v_c_runs)])
          || array_fill('run:completed'::text, array[coalesce(cardinality(v_done_runs), 0)]),
        v_c_runs || v_done_runs,
        v_c_flows || v_done_flows,
        v_c_steps,
        array_fill('completed'::text, array[cardinality(v_c_runs) + coalesce(cardinality(v_done_runs), 0)]),
        case when v_realtime then v_events || coalesce(v_run_events, '{}') end);

      -- Taskless steps (maps over an empty array) that became ready complete by cascade. (The flows of these
      -- runs have no conditions, so resolving conditions first would change nothing.) Only a dependent updated
      -- above can have become ready.
      if v_ready is not null then
        v_cascaded := array(
          select r.run_id
            from (select distinct x.run_id from unnest(v_open_runs) as x (run_id) order by x.run_id) as r
           where exists (
             select 1
               from pgflow.step_states as ss
              where ss.run_id = r.run_id
                and ss.status = 'created'
                and ss.remaining_deps = 0
                and ss.initial_tasks = 0)
           order by r.run_id);
        foreach v_run_id in array v_cascaded loop
          perform pgflow.cascade_complete_taskless_steps(v_run_id);
        end loop;
      end if;
    end if;

    -- The completed tasks' messages, one archive call per queue (in the order of the queues' names).
    if v_queue_count = 1 then
      perform pgmq.archive(v_msg_queues[1], v_msg_ids);
    elsif v_queue_count > 1 then
      for v_queue in
        select m.queue_name, array_agg(m.message_id order by m.message_id) as msg_ids
          from unnest(v_msg_queues, v_msg_ids) as m (queue_name, message_id)
         group by m.queue_name
         order by m.queue_name
      loop
        perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
      end loop;
    end if;

    -- Only runs where a dependent became ready or a cascade ran can have steps to start. Without either, the only
    -- steps to start are the dependents the update above started, and their fields are at hand.
    if v_ready is not null or cardinality(v_cascaded) > 0 then
      perform pgflow._start_ready_steps_batch(coalesce(v_ready, '{}') || v_cascaded, v_started_runs, v_started_slugs);
      perform pgflow._maybe_complete_runs(v_cascaded);
    elsif v_started_runs is not null then
      perform pgflow._send_step_tasks(v_started_runs, v_started_slugs, v_started_flows, v_started_queues,
                                      v_started_delays, v_started_counts);
    end if;

    foreach v_pos in array v_fast loop
      v_outcomes[v_pos] := 'recorded';
    end loop;
  end if;

  -- Everything else, one complete_task call per task.
  foreach v_pos in array v_slow loop
    v_status := null;
    select t.status into v_status
      from pgflow.complete_task(complete_tasks.run_ids[v_pos], complete_tasks.step_slugs[v_pos],
                                complete_tasks.task_indexes[v_pos], complete_tasks.outputs[v_pos],
                                complete_tasks.attempts[v_pos]) as t;
    v_outcomes[v_pos] := case
                           when v_before[v_pos] = 'started' and v_status is distinct from 'started' then 'recorded'
                           else 'ignored'
                         end;
  end loop;

  -- Every element reports its task's status as it is now: when every element was recorded here, 'completed' (nothing
  -- after the update above changes a completed task), without reading the tasks again.
  if cardinality(v_fast) = v_n then
    for v_pos in 1 .. v_n loop
      task_position := v_pos;
      task_status := 'completed';
      outcome := 'recorded';
      return next;
    end loop;
    return;
  end if;
  return query
    select x.pos::integer, t.status, v_outcomes[x.pos]
      from unnest(complete_tasks.run_ids, complete_tasks.step_slugs, complete_tasks.task_indexes)
             with ordinality as x (run_id, step_slug, task_index, pos)
      left join lateral (
        select t.status
          from pgflow.step_tasks as t
         where t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
         limit 1) as t on true
     order by x.pos;
end;
$$;

comment on function pgflow.complete_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], outputs jsonb[], attempts integer[]) is $doc$
pgflow.complete_tasks(run_ids, step_slugs, task_indexes, outputs, attempts) completes many tasks in one call (one
transaction), element i of the arrays naming one task, its output and (optionally) the attempt that produced it.
It guarantees:
  * attempt fencing (v0.20.0): an element whose attempts[i] is given and is not the task's current attempt, or
    whose task is not 'started', changes nothing (outcome 'stale' or 'ignored'); the same task named again later
    in the call changes nothing either (outcome 'duplicate', not a second 'completed'); attempts NULL (or a NULL
    element) is not fenced;
  * the outcome is the one of calling pgflow.complete_task(run_ids[i], step_slugs[i], task_indexes[i],
    outputs[i]) for every i, in the order of (run_id, step_slug, task_index): every guarantee of complete_task
    holds for every task (one result recorded per task; late, replayed and unknown callbacks, failed runs and
    type violations behave exactly as there);
  * rows are locked in the order runs, step states, tasks, each set sorted by key, so concurrent calls (batches
    or single complete_task calls) never wait on each other in a cycle;
  * the cost grows with the number of elements only, never with the size of the tables, whatever the planner's
    statistics or cached generic plans say: every row is looked up by key, one index lookup per row, in nested
    loops only (v0.20.0; before, a generic plan could read every step state of the flow for each completed task,
    or a whole table through its primary key when the plan was made while the table was small); the
    definitions (steps, dependencies) are read once per call for the steps named in it, not once per task;
  * tasks that are plainly completable - run, step state and task 'started', first mention of the task in the
    call, the flow has no step with a condition pattern, no type violation is possible, and the same holds for
    every other task of the same run in the call - are completed together: one UPDATE of their tasks, one of
    their step states (a step whose last task completes becomes 'completed' with its output in the same row
    version), one of the dependents (remaining_deps, map task counts), one UPDATE of the runs (a run left
    without steps becomes 'completed' in the same row version), step:completed and run:completed events in one
    call (every step:completed by run and step_index, then every run:completed: per run, its steps in
    step_index order, then the run), taskless steps cascade, one pgmq.archive call
    per queue for their messages, ready steps of the runs where a dependent became ready or a cascade ran start
    through pgflow._start_ready_steps_batch, and runs finished by a cascade complete through
    pgflow._maybe_complete_runs; every other task goes through pgflow.complete_task itself, afterwards. Events of one run keep their causal order (a dependent's step:started may follow the
    completion of a sibling completed in the same call);
  * returns one row per array element: its 1-based position, the task's status afterwards ('completed' when
    recorded; the status complete_task reports otherwise; NULL when no such task exists) and the outcome:
    'recorded' (this call recorded the result: the task completed, or failed with a type violation), 'stale',
    'ignored' (the task, its step or its run is no longer 'started': nothing recorded), 'duplicate' or 'unknown'
    (no such task);
  * arrays of different lengths raise an error naming the lengths before anything changes; NULL or empty
    arrays complete nothing and return nothing. An error in any task rolls the whole call back: callers that
    must not lose the other results call complete_task per task then.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_delete_flow_and_data.sql
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
-- end generated

-- generated from sql/core: 0100_function_ensure_flow_compiled.sql
create or replace function pgflow.ensure_flow_compiled(
  flow_slug         text,
  shape             jsonb,
  allow_data_loss   boolean default false,
  queue_mode        text    default null,
  message_retention text    default null
)
returns jsonb
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_differences text[];
  v_mode        text := coalesce(ensure_flow_compiled.queue_mode, 'flow');
  v_stored_mode text;
  v_stored_retention text;
begin
  if v_mode not in ('flow', 'step') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": queue_mode must be ''flow'' or ''step'', got ''%s''',
        ensure_flow_compiled.flow_slug, v_mode);
  end if;
  if ensure_flow_compiled.message_retention not in ('archive', 'delete') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": message_retention must be ''archive'' or ''delete'', got ''%s''',
        ensure_flow_compiled.flow_slug, ensure_flow_compiled.message_retention);
  end if;
  perform pgflow._validate_flow_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape);
  perform pg_advisory_xact_lock(1, hashtext(lower(ensure_flow_compiled.flow_slug)));

  select f.queue_mode, f.message_retention into v_stored_mode, v_stored_retention
    from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug;
  if not found then
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape, v_mode,
                                          ensure_flow_compiled.message_retention);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;

  -- The message retention only decides what a claim does with a message (every other path handles both), so it
  -- is set in place, whatever the shapes say; only a change writes (a worker role needs UPDATE on that column
  -- only then: roles.sql grants it).
  if ensure_flow_compiled.message_retention <> v_stored_retention then
    update pgflow.flows as f
       set message_retention = ensure_flow_compiled.message_retention
     where f.flow_slug = ensure_flow_compiled.flow_slug;
  end if;

  -- The queue mode is deployment metadata, compared apart from the DAG shape but with the same consequences.
  v_differences := pgflow._compare_flow_shapes(
    ensure_flow_compiled.shape, pgflow._get_flow_shape(ensure_flow_compiled.flow_slug));
  if v_stored_mode <> v_mode then
    v_differences := format('Queue mode differs: ''%s'' vs ''%s''', v_mode, v_stored_mode) || v_differences;
  end if;

  if cardinality(v_differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;

  if pgflow.is_local() or coalesce(ensure_flow_compiled.allow_data_loss, false) then
    perform pgflow.delete_flow_and_data(ensure_flow_compiled.flow_slug);
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape, v_mode,
                                          ensure_flow_compiled.message_retention);
    return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(v_differences));
  end if;

  return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(v_differences));
end;
$$;

comment on function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_data_loss boolean, queue_mode text, message_retention text) is $doc$
pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss, queue_mode, message_retention) guarantees: after it
returns, the stored flow has the caller's shape and queue mode (NULL = 'flow'; anything but 'flow' or 'step' is
refused with 22023 before anything is read), or nothing was changed and the result says why. message_retention
(v0.20.0; 'archive' or 'delete', anything else refused with 22023 before anything is read) is stored as given in
every outcome, also 'verified' and 'mismatch': it decides only what a claim does with a task's message, which is
safe to change at any time, so it is never a difference; NULL keeps the stored value ('archive' for a new
flow); only a change writes (UPDATE of flows.message_retention, which roles.sql grants pgflow_worker). Result:
{"status": s, "differences": [...]}
  * 'compiled'   - the flow did not exist and was created from the shape (in any environment);
  * 'verified'   - the stored shape equals the caller's; nothing changed;
  * 'recompiled' - shapes differed and pgflow.is_local() or allow_data_loss: the flow and ALL its data (runs,
                   states, tasks, queue and archive) were deleted and the flow created again from the shape;
  * 'mismatch'   - shapes differed otherwise; nothing changed.
A shape the DSL could not produce (NULL, not an object, duplicate step slugs, maxAttempts 0, ...) is refused by
pgflow._validate_flow_shape (22023, naming the bad value) before anything is read or changed (v0.20.0).
differences lists 'Queue mode differs: ''<caller>'' vs ''<stored>''' first when the queue modes differ (v0.20.0; the
mode is compared apart from the DAG shape, with the same consequences), then _compare_flow_shapes(shape, stored
shape) (the caller's shape is "first"). Switching a flow's queue mode therefore recompiles it only where a shape
change would.
Concurrent calls for one normalized slug (and create_flow / delete_flow_and_data for it) are serialised by the
transaction-level advisory lock (1, hashtext(lower(flow_slug))), so slugs differing only in letter case share it.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_fail_task.sql
create or replace function pgflow.fail_task(
  run_id        uuid,
  step_slug     text,
  task_index    integer,
  error_message text,
  attempt       integer default null,
  permanent     boolean default false,
  retry_delay   integer default null
)
returns setof pgflow.step_tasks
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run            pgflow.runs;
  v_state          pgflow.step_states;
  v_task           pgflow.step_tasks;
  v_max_attempts   integer;
  v_base_delay     integer;
  v_when_exhausted text;
  v_queue          record;
  v_delay          integer;
  v_retry_at       timestamptz;
begin
  if fail_task.error_message is null then
    raise exception 'fail_task: error_message must not be NULL (run %, step %, task %)',
      fail_task.run_id, fail_task.step_slug, fail_task.task_index
      using errcode = '22004';
  end if;
  if fail_task.retry_delay < 0 then
    raise exception 'fail_task: retry_delay must be >= 0 seconds, got % (run %, step %, task %)',
      fail_task.retry_delay, fail_task.run_id, fail_task.step_slug, fail_task.task_index
      using errcode = '22023';
  end if;

  select r.* into v_run from pgflow.runs as r where r.run_id = fail_task.run_id for update;
  if not found then
    return;
  end if;

  select ss.* into v_state
    from pgflow.step_states as ss
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
     for update;

  select t.* into v_task
    from pgflow.step_tasks as t
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
     for update;
  if not found then
    return;
  end if;

  -- A report from an attempt that is no longer current changes nothing.
  if fail_task.attempt is not null
     and (v_task.status <> 'started' or v_task.attempts_count <> fail_task.attempt) then
    return next v_task;
    return;
  end if;

  -- Failed or cancelled run: its unfinished tasks were cancelled and their messages archived; nothing changes.
  if v_run.status in ('failed', 'cancelled') then
    return next v_task;
    return;
  end if;

  -- Late or replayed callback for a step that is no longer running.
  if v_state.status is distinct from 'started' then
    if v_task.message_id is not null then
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
    end if;
    return next v_task;
    return;
  end if;

  -- Only a started task can fail.
  if v_task.status <> 'started' then
    return next v_task;
    return;
  end if;

  select coalesce(s.opt_max_attempts, f.opt_max_attempts),
         coalesce(s.opt_base_delay, f.opt_base_delay),
         s.when_exhausted
    into v_max_attempts, v_base_delay, v_when_exhausted
    from pgflow.steps as s
    join pgflow.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_run.flow_slug and s.step_slug = fail_task.step_slug;

  -- Retry.
  if v_task.attempts_count - v_task.attempts_before_retry < v_max_attempts and v_task.permanently_stalled_at is null
     and not coalesce(fail_task.permanent, false) then
    v_delay := coalesce(fail_task.retry_delay,
                        pgflow.calculate_retry_delay(v_base_delay, v_task.attempts_count - v_task.attempts_before_retry));
    -- The message, still in the queue or deleted at the claim (message_retention 'delete'), becomes readable
    -- after the delay; a message sent again gives the task a new message_id, which the update below returns.
    if v_task.message_id is not null then
      select m.vt into v_retry_at
        from pgflow._make_task_messages_visible(v_task.queue_name, array[v_task.message_id], array[v_delay]) as m;
    end if;
    v_retry_at := coalesce(v_retry_at, clock_timestamp() + make_interval(secs => v_delay));

    update pgflow.step_tasks as t
       set status = 'queued',
           started_at = null,
           failed_at = null,
           error_message = fail_task.error_message,
           retry_at = v_retry_at
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.task_index = fail_task.task_index
    returning t.* into v_task;

    -- Wake the workers of the queue: now, or when the message becomes visible.
    if v_task.message_id is not null then
      if v_delay = 0 then
        perform pgflow._wake_queue(v_task.queue_name, 0);
      else
        perform pgflow._notify_queue_visible_at(v_task.queue_name, v_retry_at);
      end if;
    end if;
    return next v_task;
    return;
  end if;

  -- Exhausted.
  update pgflow.step_tasks as t
     set status = 'failed',
         failed_at = now(),
         error_message = fail_task.error_message
   where t.run_id = fail_task.run_id
     and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;

  if v_task.message_id is not null then
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end if;

  if v_when_exhausted = 'fail' then
    update pgflow.step_states as ss
       set status = 'failed',
           failed_at = now(),
           error_message = fail_task.error_message
     where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
    returning ss.* into v_state;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:failed',
        'run_id', v_state.run_id,
        'flow_slug', v_state.flow_slug,
        'step_slug', v_state.step_slug,
        'status', v_state.status,
        'error_message', v_state.error_message,
        'failed_at', v_state.failed_at),
      'step:' || v_state.step_slug || ':failed',
      v_state.run_id);

    -- The rest of the run will not run: unfinished steps skipped, unfinished tasks cancelled, messages archived.
    perform pgflow._finish_run_steps(fail_task.run_id, 'run_failed');

    update pgflow.runs as r
       set status = 'failed',
           failed_at = now()
     where r.run_id = fail_task.run_id
    returning r.* into v_run;

    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:failed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'error_message', fail_task.error_message,
        'failed_at', v_run.failed_at),
      'run:failed',
      v_run.run_id);

    return next v_task;
    return;
  end if;

  -- when_exhausted 'skip' or 'skip-cascade': the step is skipped, the run goes on.
  update pgflow.step_states as ss
     set status = 'skipped',
         skip_reason = 'handler_failed',
         skipped_at = now(),
         error_message = fail_task.error_message,
         remaining_tasks = null,
         failed_at = null
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug
  returning ss.* into v_state;

  update pgflow.runs as r
     set remaining_steps = r.remaining_steps - 1
   where r.run_id = fail_task.run_id;

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from pgflow.step_tasks as t
     where t.run_id = fail_task.run_id
       and t.step_slug = fail_task.step_slug
       and t.status in ('queued', 'started')
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgmq.archive(v_queue.queue_name, v_queue.msg_ids);
  end loop;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'step:skipped',
      'run_id', v_state.run_id,
      'flow_slug', v_state.flow_slug,
      'step_slug', v_state.step_slug,
      'status', v_state.status,
      'skip_reason', v_state.skip_reason,
      'error_message', v_state.error_message,
      'skipped_at', v_state.skipped_at),
    'step:' || v_state.step_slug || ':skipped',
    v_state.run_id);

  if v_when_exhausted = 'skip-cascade' then
    perform pgflow._cascade_force_skip_steps(fail_task.run_id, fail_task.step_slug, 'handler_failed');
  else
    update pgflow.step_states as cs
       set remaining_deps = cs.remaining_deps - 1,
           initial_tasks = case
                             when c.step_type = 'map' and c.deps_count = 1 and cs.status = 'created' then 0
                             else cs.initial_tasks
                           end
      from pgflow.deps as d
      join pgflow.steps as c on c.flow_slug = d.flow_slug and c.step_slug = d.step_slug
     where d.flow_slug = v_run.flow_slug
       and d.dep_slug = fail_task.step_slug
       and cs.run_id = fail_task.run_id
       and cs.step_slug = d.step_slug;

    if not pgflow.cascade_resolve_conditions(fail_task.run_id) then
      perform pgflow._archive_task_message(fail_task.run_id, fail_task.step_slug, fail_task.task_index);
      return next v_task;
      return;
    end if;

    perform pgflow.cascade_complete_taskless_steps(fail_task.run_id);
    perform pgflow.start_ready_steps(fail_task.run_id);
  end if;

  perform pgflow.maybe_complete_run(fail_task.run_id);

  return next v_task;
end;
$$;

comment on function pgflow.fail_task(run_id uuid, step_slug text, task_index integer, error_message text, attempt integer, permanent boolean, retry_delay integer) is $doc$
pgflow.fail_task(run_id, step_slug, task_index, error_message, attempt, permanent, retry_delay) guarantees
(returns the task row; none if unknown):
  * a NULL error_message is refused (SQLSTATE 22004, naming the task), and so is a negative retry_delay
    (SQLSTATE 22023, naming the value and the task), before anything changes;
  * attempt fencing (v0.20.0): when attempt is given and the task is not 'started' or its attempts_count is not
    attempt, the report comes from an attempt that is no longer current: nothing changes at all (no message is
    touched) and the row is returned as it is. A NULL attempt (pgflow's four-argument call) is not fenced;
  * permanent => true (the handler said the error will not go away): the task does not retry, whatever attempts
    are left; it is failed as an exhausted task (below);
  * rows are locked in the order run, step state, task (as in complete_task and requeue_stalled_tasks);
  * failed or cancelled run (v0.20.0): nothing changes - its unfinished tasks were cancelled and their messages
    archived when it ended, so a late failure is fenced like a late result;
  * step not 'started' (late or replayed callback): this task's message is archived, nothing else changes (no
    double decrement, no event);
  * task not 'started': nothing changes at all, the message keeps its visibility (upstream pgflow pushed it by
    the retry delay);
  * attempts left (attempts_count - attempts_before_retry < coalesce(step, flow) opt_max_attempts, and the task
    was not given up as permanently stalled): the task goes back to 'queued' (started_at NULL, error_message
    kept) and its message becomes visible after retry_delay seconds from now when given (v0.20.0: the handler's
    choice, e.g. an HTTP Retry-After; at most 2147483647, the integer range; it still spends the attempt), else
    after pgflow.calculate_retry_delay(coalesce(step, flow) opt_base_delay, attempts_count -
    attempts_before_retry); retry_at records that time (the message's new vt). A message deleted at the claim
    (flows.message_retention 'delete') is sent again and the task stores its new message_id
    (pgflow._make_task_messages_visible). The queue's workers are told:
    pgflow._wake_queue(queue, 0) for a delay of 0 (one alive worker of the queue, else a broadcast), else
    pgflow._notify_queue_visible_at (payload {"visible_at": ...}); no event;
  * exhausted: the task becomes 'failed' and its message is archived, then per the step's when_exhausted:
    'fail' -> the step fails (step:failed), pgflow._finish_run_steps(run_id, 'run_failed') skips the run's
    unfinished steps (step:skipped each), cancels its unfinished tasks, archives their messages and tells the
    workers of started ones ({"cancel_run": ...}), then the run fails (run:failed, last);
    'skip' -> step skipped (handler_failed, error_message kept), sibling messages archived, step:skipped,
    dependents released (map dependents get 0 tasks), conditions, taskless cascade, ready steps start, the run
    may complete; 'skip-cascade' -> like 'skip' but every dependent is skipped (dependency_skipped).
Every message operation uses the queue the task stored (step_tasks.queue_name): single-message pgmq.archive and
pgflow._make_task_messages_visible calls for this task, one batch pgmq.archive call per queue when several tasks' messages are archived.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_retry_run.sql
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
-- end generated

-- generated from sql/core: 0100_function_start_ready_steps.sql
create or replace function pgflow.start_ready_steps(run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run_status text;
  v_step       record;
  v_queues     text[] := '{}';
  v_delays     integer[] := '{}';
begin
  select r.status into v_run_status from pgflow.runs as r where r.run_id = start_ready_steps.run_id;
  if v_run_status is distinct from 'started' then
    return;
  end if;

  for v_step in
    with started as (
      update pgflow.step_states as ss
         set status = 'started',
             started_at = now(),
             remaining_tasks = ss.initial_tasks
       where ss.run_id = start_ready_steps.run_id
         and ss.status = 'created'
         and ss.remaining_deps = 0
         and ss.initial_tasks > 0
      returning ss.flow_slug, ss.run_id, ss.step_slug, ss.status, ss.started_at, ss.remaining_tasks,
                ss.remaining_deps, ss.initial_tasks
    )
    select st.*, s.step_index, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
      from started as st
      join pgflow.steps as s on s.flow_slug = st.flow_slug and s.step_slug = st.step_slug
     order by s.step_index
  loop
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'step:started',
        'run_id', v_step.run_id,
        'flow_slug', v_step.flow_slug,
        'step_slug', v_step.step_slug,
        'status', v_step.status,
        'started_at', v_step.started_at,
        'remaining_tasks', v_step.remaining_tasks,
        'remaining_deps', v_step.remaining_deps),
      'step:' || v_step.step_slug || ':started',
      v_step.run_id);

    -- send_batch returns the new ids in array order and ids increase along the array, so the n-th smallest id
    -- belongs to the message with task_index n.
    insert into pgflow.step_tasks (flow_slug, run_id, step_slug, task_index, message_id, queue_name)
    select v_step.flow_slug, v_step.run_id, v_step.step_slug, (m.n - 1)::integer, m.msg_id, v_step.queue_name
      from (
        select sent.msg_id, row_number() over (order by sent.msg_id) as n
          from pgmq.send_batch(
                 v_step.queue_name,
                 array(
                   select jsonb_build_object(
                            'flow_slug', v_step.flow_slug,
                            'run_id', v_step.run_id,
                            'step_slug', v_step.step_slug,
                            'task_index', i)
                     from generate_series(0, v_step.initial_tasks - 1) as i
                    order by i),
                 null::jsonb[],
                 clock_timestamp() + make_interval(secs => v_step.start_delay)) as sent(msg_id)
      ) as m;

    v_queues := v_queues || v_step.queue_name;
    v_delays := v_delays || v_step.start_delay;
  end loop;

  -- Wake the workers waiting on each queue (at commit; PostgreSQL folds identical notifications of one
  -- transaction into one): '' for undelayed messages, and for each distinct delay the time its messages become
  -- visible (send_batch gave them clock_timestamp() + delay a moment ago, so this time is at or just after it).
  for v_step in
    select distinct x.queue_name, x.delay
      from unnest(v_queues, v_delays) as x (queue_name, delay)
     order by x.queue_name, x.delay
  loop
    perform pgflow._wake_queue(v_step.queue_name, v_step.delay);
  end loop;
end;
$$;

comment on function pgflow.start_ready_steps(run_id uuid) is $doc$
pgflow.start_ready_steps(run_id) guarantees:
  * nothing happens unless the run is 'started';
  * every step state of the run that is 'created' with remaining_deps 0 and initial_tasks > 0 becomes 'started'
    (started_at now, remaining_tasks = initial_tasks), exactly once even when called concurrently;
  * per started step, in step_index order: step:started is emitted, one message per task
    {"flow_slug", "run_id", "step_slug", "task_index"} is sent with one pgmq.send_batch call to the step's queue
    (steps.queue_name), delayed by the step's opt_start_delay seconds (NULL = 0), and one 'queued' step_tasks
    row per message is written with its message_id and that same queue_name (task_index 0 .. initial_tasks-1,
    paired with the message carrying that index); no queue is created here (no DDL);
  * after sending undelayed messages, pgflow._wake_queue wakes a worker of that queue (v0.20.0: one alive
    worker on its own channel, else every listener on 'pgflow:queue:<queue_name>'); after sending delayed ones,
    pgflow._wake_queue tells them when they
    become visible ({"visible_at": ...}, one per queue and distinct delay; v0.20.0);
  * steps with initial_tasks NULL (dependent maps whose parent has not completed) or 0 (taskless, completed by
    cascade_complete_taskless_steps) are never started here. Conditions are not evaluated here: callers resolve
    them first (cascade_resolve_conditions / cascade_complete_taskless_steps).
$doc$;
-- end generated

-- generated from sql/core: 0095_function__make_task_messages_visible.sql
create or replace function pgflow._make_task_messages_visible(p_queue_name text, p_msg_ids bigint[], p_delays integer[])
returns table (old_msg_id bigint, msg_id bigint, vt timestamptz)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_found bigint[];
  v_vts   timestamptz[];
  v_row   record;
  v_group record;
begin
  if coalesce(cardinality(p_msg_ids), 0) = 0 then
    return;
  end if;

  -- Messages still in the queue (archive retention, or never claimed) keep their id: only their visibility moves.
  select coalesce(array_agg(s.msg_id), '{}'), coalesce(array_agg(s.vt), '{}')
    into v_found, v_vts
    from pgflow.set_vt_batch(p_queue_name, p_msg_ids, p_delays) as s;
  return query select f.id, f.id, f.vt from unnest(v_found, v_vts) as f (id, vt);
  if cardinality(v_found) = cardinality(p_msg_ids) then
    return;
  end if;

  -- A message that is gone was deleted when its task was claimed (message_retention 'delete'): the task gets a new
  -- message with the same body, one send_batch per delay, and stores the new id. Only tasks whose run and step
  -- still run get one, so a task of a finished or cancelled run is never sent to a worker again.
  for v_group in
    select x.delay, clock_timestamp() + make_interval(secs => x.delay) as visible_at,
           array_agg(t.message_id order by t.message_id) as old_ids,
           array_agg(jsonb_build_object('flow_slug', t.flow_slug, 'run_id', t.run_id,
                                        'step_slug', t.step_slug, 'task_index', t.task_index)
                     order by t.message_id) as bodies
      from (select distinct on (m.id) m.id, coalesce(m.delay, 0) as delay
              from unnest(p_msg_ids, p_delays) as m (id, delay)
             where m.id <> all (v_found)
             order by m.id) as x
      cross join lateral (
        select t.flow_slug, t.run_id, t.step_slug, t.task_index, t.message_id
          from pgflow.step_tasks as t
         where t.queue_name = p_queue_name
           and t.message_id = x.id
         limit 1) as t
     where (select r.status from pgflow.runs as r where r.run_id = t.run_id) = 'started'
       and (select ss.status from pgflow.step_states as ss
             where ss.run_id = t.run_id and ss.step_slug = t.step_slug) = 'started'
     group by x.delay
     order by x.delay
  loop
    for v_row in
      with sent as (
        select s.msg_id, row_number() over (order by s.msg_id) as n
          from pgmq.send_batch(p_queue_name, v_group.bodies, null::jsonb[], v_group.visible_at) as s (msg_id)
      ),
      pairs as (
        select o.old_id, sent.msg_id
          from unnest(v_group.old_ids) with ordinality as o (old_id, n)
          join sent on sent.n = o.n
      ),
      moved as (
        update pgflow.step_tasks as t
           set message_id = p.msg_id
          from pairs as p
         where t.queue_name = p_queue_name
           and t.message_id = p.old_id
        returning p.old_id, p.msg_id
      )
      select m.old_id, m.msg_id from moved as m order by m.old_id
    loop
      old_msg_id := v_row.old_id;
      msg_id := v_row.msg_id;
      vt := v_group.visible_at;
      return next;
    end loop;
  end loop;
end;
$$;

comment on function pgflow._make_task_messages_visible(p_queue_name text, p_msg_ids bigint[], p_delays integer[]) is $doc$
pgflow._make_task_messages_visible(p_queue_name, p_msg_ids, p_delays) guarantees (v0.20.0): the tasks whose
stored identity is (p_queue_name, p_msg_ids[i]) can be read again after p_delays[i] seconds (NULL or 0 = now), in
every message retention:
  * a message still in the queue gets its visibility set (pgflow.set_vt_batch) and keeps its id;
  * a message no longer in the queue - deleted when its task was claimed, flows.message_retention 'delete' - is
    sent again with the same body ({"flow_slug", "run_id", "step_slug", "task_index"}; one pgmq.send_batch per
    delay, visible at the time it returns), and the task's step_tasks.message_id becomes the new id; this happens only for a task whose run and
    step are 'started' (a task of a finished, failed or cancelled run is never sent again), and ids that name no
    task are ignored;
  * returns one row per message made visible: the id the caller gave, the id the task has now (the same unless
    sent again) and when it becomes visible.
The callers lock the task rows first (release_tasks, requeue_stalled_tasks, fail_task), so two calls never send
one task twice. Messages are only sent and changed through PGMQ's public functions and pgflow.set_vt_batch.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_requeue_stalled_tasks.sql
create or replace function pgflow.requeue_stalled_tasks()
returns integer
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- Key lookups only, whatever the statistics say: the runs are found by idx_runs_status, their step states and
-- tasks by primary-key prefix (the settings of the hot paths' entry points).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_requeued   integer := 0;
  v_queue      record;
  v_task       record;
  v_requeue    tid[];
  v_gu_runs    uuid[];
  v_gu_steps   text[];
  v_gu_indexes integer[];
  v_gu_counts  integer[];
  v_gu_timeouts integer[];
begin
  -- No index finds started tasks (v0.20.0): one on a column a claim or a completion changes, or with status in its
  -- predicate, would make those updates write index entries instead of heap-only tuples
  -- (sql/core/0026_table_step_tasks.sql). A started task belongs to a started step state of a started run, and
  -- idx_runs_status finds those: this one scan costs the runs in progress (a backlog included), not the history.
  -- It finds both kinds of stalled task: the ones to requeue (by physical address) and the ones to give up.
  select coalesce(array_agg(c.row_address) filter (where c.requeued_count < 3), '{}'),
         coalesce(array_agg(c.run_id order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.step_slug order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.task_index order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.requeued_count order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}'),
         coalesce(array_agg(c.timeout_seconds order by c.run_id, c.step_index, c.task_index) filter (where c.requeued_count >= 3), '{}')
    into v_requeue, v_gu_runs, v_gu_steps, v_gu_indexes, v_gu_counts, v_gu_timeouts
    from (select t.ctid as row_address, t.run_id, t.step_slug, t.task_index, t.requeued_count, s.step_index,
                 coalesce(s.opt_timeout, f.opt_timeout) as timeout_seconds
            from pgflow.runs as r
            join pgflow.step_states as ss on ss.run_id = r.run_id
            join pgflow.step_tasks as t on t.run_id = ss.run_id and t.step_slug = ss.step_slug
            join pgflow.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
            join pgflow.flows as f on f.flow_slug = t.flow_slug
           where r.status = 'started'
             and ss.status = 'started'
             and t.status = 'started'
             and t.permanently_stalled_at is null
             and t.started_at < now() - make_interval(secs => coalesce(s.opt_timeout, f.opt_timeout)::bigint + 30)
         ) as c;

  for v_queue in
    -- Locked by address and re-checked (FOR UPDATE SKIP LOCKED): a task changed since the scan (completed, failed,
    -- released) has a new address and is left alone, as is one another transaction holds; a later call sees it.
    with stalled as (
      select l.row_address
        from unnest(v_requeue) as k (row_address)
        cross join lateral (
          select t.ctid as row_address
            from pgflow.step_tasks as t
           where t.ctid = k.row_address
             and t.status = 'started'
             and t.permanently_stalled_at is null
             for update of t skip locked) as l
    ),
    requeued as (
      update pgflow.step_tasks as t
         set status = 'queued',
             started_at = null,
             last_worker_id = null,
             requeued_count = t.requeued_count + 1,
             last_requeued_at = now()
       where t.ctid = any (array(select st.row_address from stalled as st))
      returning t.queue_name, t.message_id
    )
    select rq.queue_name,
           count(*)::integer as n,
           array_agg(rq.message_id order by rq.message_id) filter (where rq.message_id is not null) as msg_ids
      from requeued as rq
     group by rq.queue_name
     order by rq.queue_name
  loop
    v_requeued := v_requeued + v_queue.n;
    if v_queue.msg_ids is not null then
      perform pgflow._make_task_messages_visible(v_queue.queue_name, v_queue.msg_ids,
                                                 array_fill(0, array[cardinality(v_queue.msg_ids)]));
    end if;
  end loop;

  for v_task in
    select g.run_id, g.step_slug, g.task_index, g.requeued_count, g.timeout_seconds
      from unnest(v_gu_runs, v_gu_steps, v_gu_indexes, v_gu_counts, v_gu_timeouts)
             as g (run_id, step_slug, task_index, requeued_count, timeout_seconds)
  loop
    -- Lock the run first, like complete_task and fail_task, then re-check: a callback may have won meanwhile.
    perform 1 from pgflow.runs as r where r.run_id = v_task.run_id for update;

    update pgflow.step_tasks as t
       set permanently_stalled_at = now()
     where t.run_id = v_task.run_id
       and t.step_slug = v_task.step_slug
       and t.task_index = v_task.task_index
       and t.status = 'started'
       and t.permanently_stalled_at is null
       and t.started_at < now() - make_interval(secs => v_task.timeout_seconds::bigint + 30);

    if found then
      perform pgflow.fail_task(
        v_task.run_id, v_task.step_slug, v_task.task_index,
        format('Task stalled: not finished within its timeout (%s s) + 30 s after %s requeues; given up by requeue_stalled_tasks',
               v_task.timeout_seconds, v_task.requeued_count));
    end if;
  end loop;

  return v_requeued;
end;
$$;

comment on function pgflow.requeue_stalled_tasks() is $doc$
pgflow.requeue_stalled_tasks() guarantees (run periodically by one worker per database, under an advisory lock;
safe to run concurrently with itself and with callbacks):
  * a task is stalled when it is 'started', not given up, its run and step are still 'started', and it started
    more than the effective step timeout (steps.opt_timeout, else flows.opt_timeout) + 30 seconds ago (upstream
    pgflow used only the flow timeout);
  * a stalled task requeued fewer than 3 times goes back to 'queued' (started_at and last_worker_id cleared,
    requeued_count + 1, last_requeued_at now; attempts_count kept) and its message becomes visible at once,
    in the queue the task stored (step_tasks.queue_name; one pgflow._make_task_messages_visible call per queue:
    a message deleted at the claim, flows.message_retention 'delete', is sent again and the task stores the new
    message_id);
    rows locked by someone else are skipped (FOR UPDATE SKIP LOCKED) and picked up on a later call;
  * a stalled task already requeued 3 times is given up: permanently_stalled_at is set and it fails through
    the ordinary failure path, pgflow.fail_task, as an exhausted task, so its step and run fail, or the step is
    skipped per when_exhausted (upstream pgflow left such runs 'started' forever);
  * returns the number of tasks requeued (not counting the ones given up);
  * its cost follows the runs in progress (v0.20.0: 'started' runs found through idx_runs_status, their step
    states and tasks by primary key), not the history of the tables;
  * any timeout the tables accept works, up to 2147483647 s: the threshold is computed in bigint, so one flow
    with an absurd timeout cannot make every call fail with "integer out of range" (v0.17.0 did).
$doc$;
-- end generated

-- generated from sql/core: 0100_function_release_tasks.sql
create or replace function pgflow.release_tasks(
  run_ids      uuid[],
  step_slugs   text[],
  task_indexes integer[],
  attempts     integer[]
)
returns table (task_position integer, released boolean)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_n        integer := coalesce(cardinality(release_tasks.run_ids), 0);
  v_released integer[];
  v_queue    record;
begin
  if v_n <> coalesce(cardinality(release_tasks.step_slugs), 0)
     or v_n <> coalesce(cardinality(release_tasks.task_indexes), 0)
     or v_n <> coalesce(cardinality(release_tasks.attempts), 0) then
    raise exception 'release_tasks: the arrays differ in length: % run_ids, % step_slugs, % task_indexes, % attempts',
      v_n, coalesce(cardinality(release_tasks.step_slugs), 0), coalesce(cardinality(release_tasks.task_indexes), 0),
      coalesce(cardinality(release_tasks.attempts), 0)
      using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;

  perform 1
     from (select distinct x.run_id, x.step_slug, x.task_index
             from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes)
                    as x (run_id, step_slug, task_index)
            order by x.run_id, x.step_slug, x.task_index) as k
     cross join lateral (
       select 1 from pgflow.step_tasks as t
        where t.run_id = k.run_id and t.step_slug = k.step_slug and t.task_index = k.task_index
          for update) as l;

  with candidates as (
    select x.pos, x.run_id, x.step_slug, x.task_index, x.attempt,
           x.pos = min(x.pos) over (partition by x.run_id, x.step_slug, x.task_index) as first
      from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes, release_tasks.attempts)
             with ordinality as x (run_id, step_slug, task_index, attempt, pos)
  ),
  updated as (
    update pgflow.step_tasks as t
       set status = 'queued',
           attempts_count = t.attempts_count - 1,
           started_at = null
      from candidates as c
     where c.first
       and t.run_id = c.run_id
       and t.step_slug = c.step_slug
       and t.task_index = c.task_index
       and t.status = 'started'
       and t.attempts_count = c.attempt
    returning c.pos, t.queue_name, t.message_id
  )
  select array_agg(u.pos) into v_released from updated as u;

  for v_queue in
    select t.queue_name, array_agg(t.message_id order by t.message_id) as msg_ids
      from unnest(release_tasks.run_ids, release_tasks.step_slugs, release_tasks.task_indexes)
             with ordinality as x (run_id, step_slug, task_index, pos)
      join pgflow.step_tasks as t
        on t.run_id = x.run_id and t.step_slug = x.step_slug and t.task_index = x.task_index
     where x.pos = any (v_released)
       and t.message_id is not null
     group by t.queue_name
     order by t.queue_name
  loop
    perform pgflow._make_task_messages_visible(v_queue.queue_name, v_queue.msg_ids,
                                               array_fill(0, array[cardinality(v_queue.msg_ids)]));
  end loop;

  return query
    select p.pos::integer, p.pos = any (coalesce(v_released, '{}'))
      from generate_series(1, v_n) as p (pos);
end;
$$;

comment on function pgflow.release_tasks(run_ids uuid[], step_slugs text[], task_indexes integer[], attempts integer[]) is $doc$
pgflow.release_tasks(run_ids, step_slugs, task_indexes, attempts) hands tasks back to the queue without spending
an attempt (v0.20.0; a worker that shuts down while handlers still run calls it for the tasks it gives up on).
Element i of the four arrays names one task and the attempt the caller holds. It guarantees:
  * a task that is 'started' at exactly attempts[i] goes back to 'queued': attempts_count - 1 (the interrupted
    attempt is not counted), started_at NULL, last_worker_id kept for the audit trail; its message becomes
    visible at once in the queue the task stored (one pgflow._make_task_messages_visible call per queue: a
    message deleted at the claim, flows.message_retention 'delete', is sent again and the task stores the new
    message_id), so any worker may claim it again;
  * anything else changes nothing: an unknown task, a task that is not 'started', one whose current attempt is
    another (the task was recovered and claimed again: that attempt is not the caller's to give back), or the
    same task named again later in the call;
  * task rows are locked in key order (FOR UPDATE), so concurrent callbacks for the same task are serialised:
    of a release and a completion of the same attempt, exactly one takes effect;
  * returns one row per array element: its 1-based position and whether this call released the task;
  * arrays of different lengths raise an error naming the four lengths (22023) before anything changes; NULL or
    empty arrays release nothing and return nothing.
$doc$;
-- end generated

-- Read and claim in one call (pgflow.read_and_start_tasks): the record it returns per message read.
create type pgflow.read_task_record as (
  msg_id       bigint,
  claimed      boolean,
  flow_slug    text,
  run_id       uuid,
  step_slug    text,
  input        jsonb,
  task_index   int,
  flow_input   jsonb,
  attempt      int,
  timeout      int,
  max_attempts int
);

-- generated from sql/core: 0095_function__claim_tasks.sql
create or replace function pgflow._claim_tasks(p_flow_slug text, p_queue_name text, p_msg_ids bigint[], p_worker_id uuid)
returns table (row_address tid, message_id bigint, vt_offset integer, delete_message boolean)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_rows tid[];
begin
  -- Every statement below finds rows by key: one unique-index lookup per message id, then the rows themselves by
  -- physical address. A join of the id set to step_tasks, or a status condition the planner could answer from a
  -- partial index, lets stale statistics (say, analyzed before a burst of queued tasks) turn the claim into a
  -- nested loop over every queued task: quadratic, 100 ms per claim of 100 tasks with 5,000 queued.
  v_rows := array(
    select t.row_address
      from (select distinct m.id from unnest(p_msg_ids) as m (id)) as m
      cross join lateral (
        select t.ctid as row_address
          from pgflow.step_tasks as t
         where t.queue_name = p_queue_name
           and t.message_id = m.id
         limit 1) as t);  -- the key is unique; LIMIT keeps the planner from turning the lookups into a join

  return query
    -- Re-checked under the row lock (FOR UPDATE SKIP LOCKED: never waits, so no lock order is needed): a row that
    -- changed since the lookup has a new address and is left to whoever changed it.
    with candidates as (
      select l.row_address
        from unnest(v_rows) as k (row_address)
        cross join lateral (
          select t.ctid as row_address
            from pgflow.step_tasks as t
           where t.ctid = k.row_address
             and t.queue_name = p_queue_name
             and t.message_id = any (p_msg_ids)
             and t.flow_slug = p_flow_slug
             and t.status = 'queued'
             and (select r.status from pgflow.runs as r where r.run_id = t.run_id) = 'started'
             and (select ss.status
                    from pgflow.step_states as ss
                   where ss.run_id = t.run_id and ss.step_slug = t.step_slug) = 'started'
             for update of t skip locked) as l
    ),
    claimed as (
      update pgflow.step_tasks as t
         set status = 'started',
             attempts_count = t.attempts_count + 1,
             started_at = now(),
             last_worker_id = p_worker_id
       where t.ctid = any (array(select c.row_address from candidates as c))
      returning t.ctid as row_address, t.flow_slug, t.step_slug, t.message_id
    ),
    -- The definitions once per call, not once per task (v0.20.0): the flow's row (every claimed task is of
    -- p_flow_slug) and the timeout of each step claimed, one lookup per step (LIMIT keeps it a lookup), gathered in
    -- a JSON object that each task reads by slug (a binary search: no join of the tasks against the steps).
    -- MATERIALIZED: one row, computed once, whatever the plan puts on either side of the join below.
    definitions as materialized (
      select f.opt_timeout as flow_timeout,
             f.message_retention = 'delete' as delete_message,
             (select jsonb_object_agg(k.step_slug, s.opt_timeout)
                from (select distinct c.step_slug from claimed as c) as k
                cross join lateral (
                  select s.opt_timeout from pgflow.steps as s
                   where s.flow_slug = p_flow_slug and s.step_slug = k.step_slug limit 1) as s) as step_timeouts
        from pgflow.flows as f
       where f.flow_slug = p_flow_slug
    )
    select c.row_address,
           c.message_id,
           least(coalesce((d.step_timeouts ->> c.step_slug)::integer, d.flow_timeout), 2147483645) + 2,
           d.delete_message
      from claimed as c
      cross join definitions as d;
end;
$$;

comment on function pgflow._claim_tasks(p_flow_slug text, p_queue_name text, p_msg_ids bigint[], p_worker_id uuid) is $doc$
pgflow._claim_tasks(p_flow_slug, p_queue_name, p_msg_ids, p_worker_id) guarantees (v0.20.0): the claim of
start_tasks and read_and_start_tasks, defined once. It claims exactly the tasks whose stored identity
(step_tasks.queue_name, message_id) is (p_queue_name, one of p_msg_ids) - p_queue_name in its canonical lower
case -, that belong to p_flow_slug, are 'queued', and whose run and step are 'started': each becomes 'started'
(attempts_count + 1, started_at now, last_worker_id = p_worker_id). Every other task is left untouched. A task is
claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two concurrent calls each
task goes to one caller only. No PGMQ row is read or changed here. Returns one row per claimed task: its physical
address (valid until the caller's transaction ends), its message id, the visibility its message needs, the
effective step timeout + 2 seconds (at most 2147483647), and whether the message is to be deleted instead
(v0.20.0: the flow's message_retention is 'delete'). Its cost grows with the number of ids only: each id is
looked up by the unique key, each row locked and updated by its address; the definitions are read once per
call (the flow) and once per step claimed, not once per task.
$doc$;
-- end generated

-- generated from sql/core: 0095_function__claimed_task_records.sql
create or replace function pgflow._claimed_task_records(p_rows tid[])
returns table (flow_slug text, run_id uuid, step_slug text, input jsonb, message_id bigint, task_index integer,
               flow_input jsonb, attempt integer, timeout integer, max_attempts integer)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
set jit = off
as $$
begin
  return query
    -- The tasks first, one at a time by address (LIMIT keeps each a lookup: a condition "ctid = any (p_rows)" on
    -- the table lets the planner read the whole primary key instead, which is what it chooses when the plan is
    -- made while the table is small).
    with tasks as materialized (
      select t.*
        from unnest(p_rows) as k (row_address)
        cross join lateral (
          select t.* from pgflow.step_tasks as t where t.ctid = k.row_address limit 1) as t
    ),
    -- The definitions once per step, not once per task (v0.20.0), one lookup each, gathered in a JSON object that
    -- each task reads by '<flow> <step>' (a binary search: joins of the tasks to the definitions may read every
    -- step of every flow and scan the tasks again for each one): [step_type, deps_count, timeout, max_attempts,
    -- the slugs of its dependencies].
    definitions as (
      select jsonb_object_agg(
               k.flow_slug || ' ' || k.step_slug,
               jsonb_build_array(s.step_type, s.deps_count, coalesce(s.opt_timeout, f.opt_timeout),
                                 coalesce(s.opt_max_attempts, f.opt_max_attempts),
                                 case
                                   when s.deps_count > 0 then (
                                     select jsonb_agg(d.dep_slug order by d.dep_slug)
                                       from pgflow.deps as d
                                      where d.flow_slug = k.flow_slug and d.step_slug = k.step_slug)
                                   else '[]'::jsonb
                                 end)) as by_step
        from (select distinct t.flow_slug, t.step_slug from tasks as t) as k
        cross join lateral (
          select s.step_type, s.deps_count, s.opt_timeout, s.opt_max_attempts
            from pgflow.steps as s
           where s.flow_slug = k.flow_slug and s.step_slug = k.step_slug
           limit 1) as s
        cross join lateral (
          select f.opt_timeout, f.opt_max_attempts from pgflow.flows as f where f.flow_slug = k.flow_slug limit 1) as f
    )
    select t.flow_slug,
           t.run_id,
           t.step_slug,
           case
             when s.step_type = 'map' and s.deps_count = 0 then (
               select r.input -> t.task_index from pgflow.runs as r where r.run_id = t.run_id)
             -- A dependent map's one dependency; each dependency's state by key (LIMIT keeps it a lookup).
             when s.step_type = 'map' then (
               select dss.output -> t.task_index
                 from pgflow.step_states as dss
                where dss.run_id = t.run_id and dss.step_slug = s.deps ->> 0
                limit 1)
             when s.deps_count = 0 then '{}'::jsonb
             else coalesce(
               (select jsonb_object_agg(d.dep_slug, dss.output)
                  from jsonb_array_elements_text(s.deps) as d (dep_slug)
                  cross join lateral (
                    select dss.output from pgflow.step_states as dss
                     where dss.run_id = t.run_id and dss.step_slug = d.dep_slug and dss.status = 'completed'
                     limit 1) as dss),
               '{}'::jsonb)
           end,
           t.message_id,
           t.task_index,
           -- The run's input only where it is the task's: its run is looked up for root steps only.
           case
             when s.step_type = 'single' and s.deps_count = 0 then (
               select r.input from pgflow.runs as r where r.run_id = t.run_id)
           end,
           t.attempts_count,
           s.timeout,
           s.max_attempts
      from tasks as t
      cross join definitions as defs
      cross join lateral (
        select x.def ->> 0 as step_type, (x.def ->> 1)::integer as deps_count, (x.def ->> 2)::integer as timeout,
               (x.def ->> 3)::integer as max_attempts, x.def -> 4 as deps
          from (select defs.by_step -> (t.flow_slug || ' ' || t.step_slug) as def offset 0) as x  -- one lookup per task
      ) as s
     order by t.message_id;
end;
$$;

comment on function pgflow._claimed_task_records(p_rows tid[]) is $doc$
pgflow._claimed_task_records(p_rows) guarantees (v0.20.0): what a worker needs to run each task at the given
physical addresses (as pgflow._claim_tasks returned them, in the same transaction), ordered by message id:
flow_slug, run_id, step_slug, input = the element task_index of the run input (root map), of the dependency's
stored output (dependent map), or {<dep_slug>: <output>} over the completed dependencies ({} for root steps);
message_id, task_index; flow_input = the run input for single steps without dependencies, NULL otherwise; attempt
(attempts_count), timeout and max_attempts (the step's, else the flow's). Read-only. Each task is read by its
address, its run by key for root steps only, the definitions once per step (v0.20.0).
$doc$;
-- end generated

-- generated from sql/core: 0100_function_start_tasks.sql
create or replace function pgflow.start_tasks(
  flow_slug  text,
  msg_ids    bigint[],
  worker_id  uuid,
  queue_name text default null
)
returns setof pgflow.step_task_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_queue_name text;
  v_claimed    tid[];
  v_ids        bigint[];
  v_offsets    integer[];
  v_deleted    bigint[];
begin
  if start_tasks.msg_ids is null or cardinality(start_tasks.msg_ids) = 0 then
    return;
  end if;

  v_queue_name := lower(coalesce(start_tasks.queue_name, pgflow._default_queue_name(start_tasks.flow_slug)));

  select array_agg(c.row_address),
         array_agg(c.message_id order by c.message_id) filter (where not c.delete_message),
         array_agg(c.vt_offset order by c.message_id) filter (where not c.delete_message),
         array_agg(c.message_id order by c.message_id) filter (where c.delete_message)
    into v_claimed, v_ids, v_offsets, v_deleted
    from pgflow._claim_tasks(start_tasks.flow_slug, v_queue_name, start_tasks.msg_ids, start_tasks.worker_id) as c;
  if v_claimed is null then
    return;
  end if;

  perform pgflow.set_vt_batch(v_queue_name, v_ids, v_offsets);
  if v_deleted is not null then
    perform pgmq.delete(v_queue_name, v_deleted);
  end if;

  return query
    select r.flow_slug, r.run_id, r.step_slug, r.input, r.message_id, r.task_index, r.flow_input
      from pgflow._claimed_task_records(v_claimed) as r
     order by r.message_id;
end;
$$;

comment on function pgflow.start_tasks(flow_slug text, msg_ids bigint[], worker_id uuid, queue_name text) is $doc$
pgflow.start_tasks(flow_slug, msg_ids, worker_id, queue_name) guarantees (phase 2 of polling, after pgmq.read*):
  * queue_name is the queue the worker actually read msg_ids from; NULL (a v0.16.0 worker calling with three
    arguments) means the flow's default queue, pgflow._default_queue_name(flow_slug). It is compared in lower
    case, the canonical form tasks store;
  * claims exactly the tasks whose stored identity (step_tasks.queue_name, message_id) is (that queue, one of
    msg_ids), that belong to flow_slug, are 'queued', and whose run and step are 'started'; each claimed task
    becomes 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id, which must be a row of
    pgflow.workers). The message body is never read: it does not authorise a claim;
  * everything else named in msg_ids is left untouched - a task that is already started (not claimed again, no
    attempt consumed), terminal or otherwise ineligible, a task of another flow, or an id no task has in that
    queue: no row changes, no message is archived, deleted or made visible earlier or later;
  * a task is claimed at most once: rows are locked with FOR UPDATE SKIP LOCKED and re-checked, so of two
    concurrent calls naming the same ids each task goes to one caller only, and only rows this call actually
    claimed are returned. No PGMQ row is locked. (The claim is pgflow._claim_tasks, shared with
    read_and_start_tasks; the returned columns come from pgflow._claimed_task_records.);
  * every claimed message's visibility is set to the effective step timeout (steps.opt_timeout, else
    flows.opt_timeout) + 2 seconds from now, at most 2147483647 s (a timeout near the integer limit cannot make
    the claim fail with "integer out of range", as in v0.17.0), in the queue the task stored, which is queue_name
    (one set_vt_batch call); when the flow's message_retention is 'delete' (v0.20.0), the claimed messages are
    deleted instead (one pgmq.delete call);
  * returns one step_task_record per claimed task, ordered by msg_id: input = the element task_index of the run
    input (root map), of the dependency's stored output (dependent map), or {<dep_slug>: <output>} over the
    completed dependencies ({} for root steps); flow_input = the run input for single steps without
    dependencies, NULL otherwise;
  * the cost of a claim grows with the number of msg_ids only, never with the number of queued tasks, whatever the
    planner's statistics say: each id is looked up by the unique key (queue_name, message_id) and each row is then
    locked and updated by its physical address (since v0.19.0; stale statistics made v0.18.0 quadratic);
  * NULL or empty msg_ids claim nothing and return nothing.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_read_and_start_tasks.sql
create or replace function pgflow.read_and_start_tasks(
  flow_slug  text,
  queue_name text,
  worker_id  uuid,
  qty        integer,
  vt         integer
)
returns setof pgflow.read_task_record
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Generic plans: every statement finds its rows by key or by address, so one plan fits every batch (as in
-- complete_tasks).
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_queue_name  text;
  v_qtable      text;
  v_read        bigint[];
  v_claimed     tid[];
  v_claimed_ids bigint[];
  v_offsets     integer[];
  v_deleted     bigint[];
  v_unclaimed   bigint[] := '{}';
begin
  if read_and_start_tasks.qty is null or read_and_start_tasks.qty < 1 then
    raise exception 'read_and_start_tasks: qty must be at least 1, got %', coalesce(read_and_start_tasks.qty::text, 'NULL')
      using errcode = '22023';
  end if;
  if read_and_start_tasks.vt is null or read_and_start_tasks.vt < 0 then
    raise exception 'read_and_start_tasks: vt must be 0 or more seconds, got %', coalesce(read_and_start_tasks.vt::text, 'NULL')
      using errcode = '22023';
  end if;
  v_queue_name := lower(coalesce(read_and_start_tasks.queue_name, pgflow._default_queue_name(read_and_start_tasks.flow_slug)));
  v_qtable := pgmq.format_table_name(v_queue_name, 'q');

  -- The read, as pgmq.read picks: visible messages, oldest first, skipping rows another reader holds. They stay
  -- locked until commit, so their one update below is this call's.
  execute format(
    $sql$
    select coalesce(array_agg(p.msg_id order by p.msg_id), '{}')
      from (select q.msg_id
              from pgmq.%I as q
             where q.vt <= clock_timestamp()
             order by q.msg_id
             limit $1
               for update skip locked) as p
    $sql$, v_qtable)
    into v_read
    using read_and_start_tasks.qty;
  if cardinality(v_read) = 0 then
    return;
  end if;

  -- The claim, as start_tasks makes it.
  select coalesce(array_agg(c.row_address), '{}'),
         coalesce(array_agg(c.message_id) filter (where not c.delete_message), '{}'),
         coalesce(array_agg(c.vt_offset) filter (where not c.delete_message), '{}'),
         coalesce(array_agg(c.message_id) filter (where c.delete_message), '{}')
    into v_claimed, v_claimed_ids, v_offsets, v_deleted
    from pgflow._claim_tasks(read_and_start_tasks.flow_slug, v_queue_name, v_read, read_and_start_tasks.worker_id) as c;

  -- Each message read is changed once, by one of up to three statements (usually one): claimed messages of
  -- flows that delete theirs at the claim (message_retention 'delete') are deleted; other claimed messages are
  -- hidden for their step's timeout + 2 s (as start_tasks sets it); messages read but not claimed are hidden for
  -- vt seconds (as pgmq.read does). read_ct counts the read. No statement joins two of these sets: these functions
  -- plan nested loops only, which would compare every message with every other.
  if cardinality(v_claimed) < cardinality(v_read) then
    v_unclaimed := array(
      select m.id from unnest(v_read) as m (id) where m.id <> all (v_claimed_ids || v_deleted) order by m.id);
  end if;
  if cardinality(v_deleted) > 0 then
    execute format('delete from pgmq.%I as q where q.msg_id = any ($1::bigint[])', v_qtable)
      using v_deleted;
  end if;
  if cardinality(v_claimed_ids) > 0 then
    execute format(
      $sql$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => c.vt_offset),
             read_ct = q.read_ct + 1
        from unnest($1::bigint[], $2::integer[]) as c (msg_id, vt_offset)
       where q.msg_id = c.msg_id
      $sql$, v_qtable)
      using v_claimed_ids, v_offsets;
  end if;
  if cardinality(v_unclaimed) > 0 then
    execute format(
      $sql$
      update pgmq.%I as q
         set vt = clock_timestamp() + make_interval(secs => $2),
             read_ct = q.read_ct + 1
       where q.msg_id = any ($1::bigint[])
      $sql$, v_qtable)
      using v_unclaimed, read_and_start_tasks.vt;
  end if;

  return query
    select c.message_id,
           true,
           c.flow_slug,
           c.run_id,
           c.step_slug,
           c.input,
           c.task_index,
           c.flow_input,
           c.attempt,
           c.timeout,
           c.max_attempts
      from pgflow._claimed_task_records(v_claimed) as c
    union all
    select u.id, false, null, null, null, null, null, null, null, null, null
      from unnest(v_unclaimed) as u (id)
     order by 1;
end;
$$;

comment on function pgflow.read_and_start_tasks(flow_slug text, queue_name text, worker_id uuid, qty integer, vt integer) is $doc$
pgflow.read_and_start_tasks(flow_slug, queue_name, worker_id, qty, vt) reads up to qty messages of queue_name and
claims their tasks in one call (v0.20.0): pgmq.read(queue_name, vt, qty) followed by pgflow.start_tasks(flow_slug,
<the ids read>, worker_id, queue_name), with one row version per message instead of two. It guarantees:
  * the read picks as pgmq.read does: messages visible now, lowest msg_id first, at most qty, skipping messages
    another transaction holds; each message read gets read_ct + 1;
  * the claim is start_tasks' claim of the ids read (both call pgflow._claim_tasks): exactly the tasks whose
    stored identity is (queue_name, one of those ids), that belong to flow_slug, are 'queued', and whose run and
    step are 'started', become 'started' (attempts_count + 1, started_at now, last_worker_id = worker_id); a task
    is claimed at most once, and every other message's task is left untouched;
  * each message read is changed once: a claimed message becomes invisible for its step's effective timeout + 2 s
    (at most 2147483647 s), as start_tasks sets it, or, when the flow's message_retention is 'delete' (v0.20.0),
    is deleted (the task row is then the only record of the claim; a retry, a release or stalled-task recovery
    sends the message again); a message read but not claimed (no task, a task of another flow, a task already
    started or finished) becomes invisible for vt seconds, as pgmq.read would have hidden it, and is otherwise
    left untouched (never archived or deleted);
  * returns one pgflow.read_task_record per message read, ordered by msg_id: claimed true with the task's columns
    as start_tasks returns them, plus attempt (the claim's attempts_count), timeout (the effective step timeout
    in seconds) and max_attempts (the effective max attempts); claimed false and the task columns NULL for a
    message read but not claimed (the caller may explain it);
  * the cost grows with qty, never with the number of queued tasks or messages: messages are read oldest first
    through the queue's primary key, tasks looked up by the unique key (queue_name, message_id) and updated by
    physical address;
  * queue_name NULL means the flow's default queue; it is compared in lower case. qty NULL or below 1 and vt NULL
    or negative raise 22023 naming the value, before anything changes; an unknown queue raises 42P01 (the queue
    table does not exist), as pgmq.read does.
Like pgflow.set_vt_batch, it reads and changes the PGMQ queue table itself (msg_id, read_ct, vt only; the table
name comes from pgmq.format_table_name, which validates it): PGMQ has no call that reads with per-message
visibility timeouts.
$doc$;
-- end generated

-- Roles that may claim tasks (start_tasks) may also read and claim in one call, and notify through pgflow._notify
-- (every notification of the engine goes through it).
select pg_temp.pgflow_v020_grant_with('pgflow.start_tasks(text,bigint[],uuid,text)',
  'pgflow.read_and_start_tasks(text, text, uuid, integer, integer), pgflow._claim_tasks(text, text, bigint[], uuid), '
  'pgflow._claimed_task_records(tid[]), pgflow._notify(text[], text[])');
-- generated from sql/core: 0100_function_fire_schedule_tick.sql
create or replace function pgflow.fire_schedule_tick(schedule_name text, tick timestamptz,
                                                     next_tick timestamptz default null)
returns uuid
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_sched  pgflow.schedules;
  v_run_id uuid;
begin
  if fire_schedule_tick.tick is null then
    raise exception 'schedule %: tick is NULL', coalesce(quote_literal(fire_schedule_tick.schedule_name), 'NULL')
      using errcode = '22004';
  end if;

  -- A worker whose clock runs ahead must not fire ticks early (and so take them from the workers whose clocks are
  -- right); a minute of tolerance keeps ordinary clock differences harmless.
  if fire_schedule_tick.tick > now() + interval '1 minute' then
    raise exception 'schedule %: tick % is in the future by the database clock (now %); check the clock of the calling worker',
      coalesce(quote_literal(fire_schedule_tick.schedule_name), 'NULL'), fire_schedule_tick.tick, now()
      using errcode = '22023';
  end if;

  -- The row lock serialises every firing of one schedule (and pause, resume and upsert): a second caller waits,
  -- then sees the advanced last_tick.
  select s.* into v_sched
    from pgflow.schedules as s
   where s.schedule_name = fire_schedule_tick.schedule_name
     for update;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(fire_schedule_tick.schedule_name), 'NULL')
      using errcode = 'P0002';
  end if;

  if v_sched.paused or fire_schedule_tick.tick <= v_sched.last_tick then
    return null;
  end if;

  v_run_id := pgflow.schedule_run_id(v_sched.schedule_name, fire_schedule_tick.tick);
  begin
    perform pgflow.start_flow(v_sched.flow_slug, v_sched.input, v_run_id);
  exception when unique_violation then
    -- Only a run with this tick's id can collide: the tick already started its run (e.g. the row was deleted
    -- and written again). Never a second run.
    if not exists (select 1 from pgflow.runs as r where r.run_id = v_run_id) then
      raise;
    end if;
    v_run_id := null;
  end;

  update pgflow.schedules as s
     set last_tick = fire_schedule_tick.tick,
         last_run_id = coalesce(v_run_id, s.last_run_id),
         next_tick = fire_schedule_tick.next_tick
   where s.schedule_name = v_sched.schedule_name;
  return v_run_id;
end;
$$;

comment on function pgflow.fire_schedule_tick(schedule_name text, tick timestamptz, next_tick timestamptz) is $doc$
pgflow.fire_schedule_tick(schedule_name, tick, next_tick) guarantees (v0.20.0; SECURITY INVOKER: the caller needs
what pgflow_worker has), in the caller's transaction:
  * NULL tick: SQLSTATE 22004; a tick more than a minute after now() (a caller whose clock runs ahead):
    SQLSTATE 22023 naming the tick and the database's time; unknown schedule (or NULL name): P0002
    'schedule <name> does not exist'; nothing changes in these cases;
  * the schedule row is locked first, so concurrent firings of one schedule are serialised;
  * a paused schedule, or a tick at or before last_tick, starts nothing and changes nothing; returns NULL;
  * otherwise exactly one run of the schedule's flow with its input starts through pgflow.start_flow, with
    run_id = pgflow.schedule_run_id(schedule_name, tick), and last_tick becomes tick, last_run_id the run and
    next_tick the given value (informational); returns the run id. If a run with that id exists already the
    tick counts as fired (last_tick advances) and NULL is returned: one tick never starts a second run, whether
    fired twice in sequence, from two sessions at once, or again after a rolled-back attempt;
  * errors of start_flow (e.g. a root map flow with a non-array input) propagate and nothing changes: the tick
    stays due. It is the caller's clock that decides a tick is due, within the minute of tolerance above.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_pause_schedule.sql
create or replace function pgflow.pause_schedule(schedule_name text)
returns pgflow.schedules
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_row pgflow.schedules;
begin
  update pgflow.schedules as s
     set paused = true,
         paused_at = coalesce(s.paused_at, now()),
         updated_at = case when s.paused then s.updated_at else now() end
   where s.schedule_name = pause_schedule.schedule_name
  returning s.* into v_row;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(pause_schedule.schedule_name), 'NULL')
      using errcode = 'P0002';
  end if;
  return v_row;
end;
$$;

comment on function pgflow.pause_schedule(schedule_name text) is $doc$
pgflow.pause_schedule(schedule_name) guarantees (v0.20.0; SECURITY DEFINER so that pgflow_client may call it
without any table privilege; it changes nothing but the named schedule's paused, paused_at and updated_at):
  * unknown name (or NULL): SQLSTATE P0002 'schedule <name> does not exist', nothing changes;
  * the schedule becomes paused (paused_at = now()) and fires no tick from the moment this transaction commits
    (pgflow.fire_schedule_tick locks the row and returns NULL for a paused schedule); runs already started are
    not touched;
  * pausing a paused schedule changes nothing (paused_at keeps the first pause's time);
  * worker startups (pgflow.upsert_schedule) never unpause it; returns the schedule row.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_resume_schedule.sql
create or replace function pgflow.resume_schedule(schedule_name text)
returns pgflow.schedules
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_row pgflow.schedules;
begin
  update pgflow.schedules as s
     set paused = false,
         paused_at = null,
         -- The ticks that passed while the schedule was paused are not fired, whatever its missed policy.
         last_tick = case when s.paused then greatest(s.last_tick, now()) else s.last_tick end,
         next_tick = case when s.paused then null else s.next_tick end,
         updated_at = case when s.paused then now() else s.updated_at end
   where s.schedule_name = resume_schedule.schedule_name
  returning s.* into v_row;
  if not found then
    raise exception 'schedule % does not exist', coalesce(quote_literal(resume_schedule.schedule_name), 'NULL')
      using errcode = 'P0002';
  end if;
  return v_row;
end;
$$;

comment on function pgflow.resume_schedule(schedule_name text) is $doc$
pgflow.resume_schedule(schedule_name) guarantees (v0.20.0; SECURITY DEFINER so that pgflow_client may call it
without any table privilege; it changes nothing but the named schedule's paused, paused_at, last_tick,
next_tick and updated_at):
  * unknown name (or NULL): SQLSTATE P0002 'schedule <name> does not exist', nothing changes;
  * a paused schedule becomes active and last_tick becomes greatest(last_tick, now()): the ticks that passed
    while it was paused never fire, also with missed = 'catch_up' (no backfill); the next tick after now fires;
    next_tick becomes NULL until a worker computes it;
  * resuming an active schedule changes nothing; returns the schedule row.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_upsert_schedule.sql
create or replace function pgflow.upsert_schedule(
  schedule_name text,
  flow_slug     text,
  cron          text,
  time_zone     text,
  input         jsonb,
  missed        text default 'skip',
  max_catch_up  integer default 10,
  since         timestamptz default now(),
  next_tick     timestamptz default null
)
returns text
language plpgsql
volatile
security invoker
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_old    pgflow.schedules;
  v_since  timestamptz := coalesce(upsert_schedule.since, now());
begin
  if not coalesce(pgflow.is_valid_slug(upsert_schedule.schedule_name), false) then
    raise exception 'invalid schedule name %: use 1 to 128 ASCII letters, digits or _, not starting with a digit',
      coalesce(quote_literal(upsert_schedule.schedule_name), 'NULL')
      using errcode = '22023';
  end if;
  if upsert_schedule.cron is null or btrim(upsert_schedule.cron) = '' then
    raise exception 'schedule %: the cron expression is empty', upsert_schedule.schedule_name
      using errcode = '22023';
  end if;
  if upsert_schedule.time_zone is null
     or not exists (select 1 from pg_catalog.pg_timezone_names as z where z.name = upsert_schedule.time_zone) then
    raise exception 'schedule %: unknown time zone %', upsert_schedule.schedule_name,
      coalesce(quote_literal(upsert_schedule.time_zone), 'NULL')
      using errcode = '22023';
  end if;
  if upsert_schedule.input is null then
    raise exception 'schedule %: input is NULL; use the JSON value null (''null''::jsonb) for no input',
      upsert_schedule.schedule_name
      using errcode = '22023';
  end if;
  if upsert_schedule.missed is null or upsert_schedule.missed not in ('skip', 'catch_up') then
    raise exception 'schedule %: missed must be ''skip'' or ''catch_up'', got %', upsert_schedule.schedule_name,
      coalesce(quote_literal(upsert_schedule.missed), 'NULL')
      using errcode = '22023';
  end if;
  if upsert_schedule.max_catch_up is null or upsert_schedule.max_catch_up not between 1 and 1000 then
    raise exception 'schedule %: max_catch_up must be between 1 and 1000, got %', upsert_schedule.schedule_name,
      coalesce(upsert_schedule.max_catch_up::text, 'NULL')
      using errcode = '22023';
  end if;
  if not exists (select 1 from pgflow.flows as f where f.flow_slug = upsert_schedule.flow_slug) then
    raise exception 'schedule %: flow % does not exist; compile it first (serve it in a worker or run ensure_flow_compiled)',
      upsert_schedule.schedule_name, coalesce(quote_literal(upsert_schedule.flow_slug), 'NULL')
      using errcode = '23503';
  end if;

  select s.* into v_old
    from pgflow.schedules as s
   where s.schedule_name = upsert_schedule.schedule_name
     for update;

  if not found then
    insert into pgflow.schedules (schedule_name, flow_slug, cron, time_zone, input, missed, max_catch_up,
                                  last_tick, next_tick)
    values (upsert_schedule.schedule_name, upsert_schedule.flow_slug, upsert_schedule.cron,
            upsert_schedule.time_zone, upsert_schedule.input, upsert_schedule.missed, upsert_schedule.max_catch_up,
            v_since, upsert_schedule.next_tick)
    on conflict on constraint schedules_pkey do nothing;
    if found then
      return 'created';
    end if;
    -- Created concurrently by another worker's startup: compare with its row like any existing one.
    select s.* into v_old
      from pgflow.schedules as s
     where s.schedule_name = upsert_schedule.schedule_name
       for update;
  end if;

  if v_old.flow_slug = upsert_schedule.flow_slug
     and v_old.cron = upsert_schedule.cron
     and v_old.time_zone = upsert_schedule.time_zone
     and v_old.input = upsert_schedule.input
     and v_old.missed = upsert_schedule.missed
     and v_old.max_catch_up = upsert_schedule.max_catch_up then
    return 'unchanged';
  end if;

  update pgflow.schedules as s
     set flow_slug = upsert_schedule.flow_slug,
         cron = upsert_schedule.cron,
         time_zone = upsert_schedule.time_zone,
         input = upsert_schedule.input,
         missed = upsert_schedule.missed,
         max_catch_up = upsert_schedule.max_catch_up,
         -- A new timetable starts now: ticks of the new cron (or zone) before this moment never fire, so a
         -- change cannot cause a burst of "missed" ticks.
         last_tick = case
                       when v_old.cron <> upsert_schedule.cron or v_old.time_zone <> upsert_schedule.time_zone
                         then greatest(v_old.last_tick, v_since)
                       else v_old.last_tick
                     end,
         next_tick = case
                       when v_old.cron <> upsert_schedule.cron or v_old.time_zone <> upsert_schedule.time_zone
                         then upsert_schedule.next_tick
                       else v_old.next_tick
                     end,
         updated_at = now()
   where s.schedule_name = upsert_schedule.schedule_name;
  return 'updated';
end;
$$;

comment on function pgflow.upsert_schedule(schedule_name text, flow_slug text, cron text, time_zone text,
  input jsonb, missed text, max_catch_up integer, since timestamptz, next_tick timestamptz) is $doc$
pgflow.upsert_schedule(schedule_name, flow_slug, cron, time_zone, input, missed, max_catch_up, since, next_tick)
guarantees (v0.20.0; SECURITY INVOKER: workers call it at startup for the schedules in their code):
  * bad arguments raise before anything is written, naming the schedule and the value: an invalid name
    (pgflow.is_valid_slug), an empty cron, a time zone PostgreSQL does not know, a NULL input, missed other than
    'skip'/'catch_up', max_catch_up outside 1..1000 (SQLSTATE 22023); a flow that does not exist (23503). The
    cron expression itself is parsed by the worker, not here;
  * a new name inserts the schedule with last_tick = since (default now()): no tick at or before the moment of
    creation ever fires; returns 'created';
  * an existing schedule whose definition (flow_slug, cron, time_zone, input, missed, max_catch_up) equals the
    arguments is not touched; returns 'unchanged';
  * otherwise the definition columns are replaced and updated_at set; when cron or time_zone changed, last_tick
    becomes greatest(last_tick, since) and next_tick the given one, so ticks of the new timetable before since
    never fire (no burst after a change); returns 'updated';
  * paused and paused_at are operator state and are never changed here;
  * concurrent calls for one name are serialised by the row lock (or the primary key for the first insert).
During a rolling deploy the definition of the most recently started worker wins.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_start_flow.sql
create or replace function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid default null)
returns setof pgflow.runs
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run_id     uuid;
  v_step_count integer;
  v_root_maps  integer;
  v_run        pgflow.runs;
  v_input_len  integer;
  v_conditions boolean;
begin
  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet find the flow's row (pgflow._lock_flow_for_start
  -- reads the newest rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flow.flow_slug)));

  select count(*), count(*) filter (where s.step_type = 'map' and s.deps_count = 0),
         coalesce(bool_or(s.required_input_pattern is not null or s.forbidden_input_pattern is not null), false)
    into v_step_count, v_root_maps, v_conditions
    from pgflow.steps as s
   where s.flow_slug = start_flow.flow_slug;

  -- A flow whose root steps start at once (steps, no conditions, no root map) starts as start_flows starts it: the
  -- root steps' states are written 'started' in one row version, and nothing is searched for that cannot be there.
  -- The checks and errors are the same (no root map to check the input of; the run's insert raises the rest).
  if v_step_count > 0 and v_root_maps = 0 and not v_conditions then
    return query select r.* from pgflow.start_flows(start_flow.flow_slug, array[start_flow.input],
                                                    array[start_flow.run_id]) as r;
    return;
  end if;

  perform pgflow._lock_flow_for_start(start_flow.flow_slug);

  if v_root_maps > 0 then
    if start_flow.input is null then
      raise exception 'Flow % has root map steps but input is NULL', start_flow.flow_slug;
    elsif jsonb_typeof(start_flow.input) <> 'array' then
      raise exception 'Flow % has root map steps but input is not an array (got %)',
        start_flow.flow_slug, jsonb_typeof(start_flow.input);
    end if;
  end if;

  -- Computed here, not inside the CASE below: the planner may fold a CASE arm with constant arguments even when
  -- the arm is never taken, and jsonb_array_length raises on a non-array.
  if jsonb_typeof(start_flow.input) = 'array' then
    v_input_len := jsonb_array_length(start_flow.input);
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  values (coalesce(start_flow.run_id, (pgflow._new_run_ids(1))[1]), start_flow.flow_slug, start_flow.input, v_step_count)
  returning * into v_run;
  v_run_id := v_run.run_id;

  insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks)
  select s.flow_slug,
         v_run_id,
         s.step_slug,
         s.deps_count,
         case
           when s.step_type = 'map' and s.deps_count = 0 then v_input_len
           when s.step_type = 'map' then null
           else 1
         end
    from pgflow.steps as s
   where s.flow_slug = v_run.flow_slug
   order by s.step_index;

  perform pgflow._emit_event(
    jsonb_build_object(
      'event_type', 'run:started',
      'run_id', v_run.run_id,
      'flow_slug', v_run.flow_slug,
      'input', v_run.input,
      'status', v_run.status,
      'remaining_steps', v_run.remaining_steps,
      'started_at', v_run.started_at),
    'run:started',
    v_run_id);

  if pgflow.cascade_resolve_conditions(v_run_id) then
    perform pgflow.cascade_complete_taskless_steps(v_run_id);
    perform pgflow.start_ready_steps(v_run_id);
    perform pgflow.maybe_complete_run(v_run_id);
  end if;

  return query select r.* from pgflow.runs as r where r.run_id = v_run_id;
end;
$$;

comment on function pgflow.start_flow(flow_slug text, input jsonb, run_id uuid) is $doc$
pgflow.start_flow(flow_slug, input, run_id) guarantees:
  * a flow with root map steps only starts with an array input: SQL NULL raises
    'Flow <slug> has root map steps but input is NULL', any other JSON type raises
    'Flow <slug> has root map steps but input is not an array (got <type>)' (P0001), before anything is written;
  * one run row (run_id = the given one, else pgflow._new_run_id(), time-ordered; remaining_steps = number of steps)
    and one step state per step ('created'; v0.20.0: a root step of a flow with steps, no condition and no root map
    is written 'started' at once, as start_flows writes it, since nothing could happen to it in between)
    (remaining_deps = deps_count; initial_tasks = 1 for single steps, the input array length for root maps, NULL for
    dependent maps until their parent completes) are written in this transaction;
  * run:started is emitted, then conditions of ready steps are resolved (a 'fail' condition fails the run and no
    task is ever created), taskless steps complete, ready steps start (tasks and messages are created) and the
    run completes if nothing is left (e.g. a flow without steps);
  * returns the run row as it is at the end ('started', 'completed' or 'failed').
A start waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow; it locks
the flow's row FOR KEY SHARE (v0.20.0: the insert side of runs_flow_slug_fkey, which the schema leaves out).
Errors: unknown flow -> runs_flow_slug_fkey (23503, the key's message and constraint name, nothing written); an
existing run_id -> runs_pkey (a retried start with the same run_id therefore never creates a second run); NULL
input without root maps -> not-null violation on runs.input.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_start_flows.sql
create or replace function pgflow.start_flows(flow_slug text, inputs jsonb[], run_ids uuid[] default null)
returns setof pgflow.runs
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_n          integer := coalesce(cardinality(start_flows.inputs), 0);
  v_ids        uuid[];
  v_step_count integer;
  v_root_maps  integer;
  v_conditions boolean;
  v_bad        record;
  v_run        record;
  v_fold       boolean;
  v_started_runs  uuid[];
  v_started_slugs text[];
  v_started_flows text[];
  v_started_queues text[];
  v_started_delays integer[];
  v_started_counts integer[];
begin
  if v_n = 0 then
    return;
  end if;

  -- Shares the flow's compilation lock (create_flow, ensure_flow_compiled and delete_flow_and_data hold it
  -- exclusively): a start waits for a compilation in progress and then reads the whole flow. Without it a start
  -- could count no steps (compilation not yet visible) yet find the flow's row (pgflow._lock_flow_for_start
  -- reads the newest rows) and complete the run at once with output NULL.
  perform pg_advisory_xact_lock_shared(1, hashtext(lower(start_flows.flow_slug)));

  perform pgflow._lock_flow_for_start(start_flows.flow_slug);
  if start_flows.run_ids is not null and cardinality(start_flows.run_ids) <> v_n then
    raise exception 'start_flows: % run_ids given for % inputs', cardinality(start_flows.run_ids), v_n;
  end if;

  select count(*),
         count(*) filter (where s.step_type = 'map' and s.deps_count = 0),
         coalesce(bool_or(s.required_input_pattern is not null or s.forbidden_input_pattern is not null), false)
    into v_step_count, v_root_maps, v_conditions
    from pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug;

  if v_root_maps > 0 then
    select x.pos, jsonb_typeof(x.input) as type into v_bad
      from unnest(start_flows.inputs) with ordinality as x (input, pos)
     where jsonb_typeof(x.input) is distinct from 'array'
     order by x.pos
     limit 1;
    if found and v_bad.type is null then
      raise exception 'Flow % has root map steps but input % is NULL', start_flows.flow_slug, v_bad.pos;
    elsif found then
      raise exception 'Flow % has root map steps but input % is not an array (got %)',
        start_flows.flow_slug, v_bad.pos, v_bad.type;
    end if;
  end if;

  -- One call makes every new id (a call per id cost more than making the id: each call sets search_path).
  v_ids := pgflow._new_run_ids(v_n);
  if start_flows.run_ids is not null then
    v_ids := array(
      select coalesce(start_flows.run_ids[p.pos], v_ids[p.pos])
        from generate_series(1, v_n) as p (pos)
       order by p.pos);
  end if;

  insert into pgflow.runs (run_id, flow_slug, input, remaining_steps)
  select x.run_id, start_flows.flow_slug, x.input, v_step_count
    from unnest(v_ids, start_flows.inputs) with ordinality as x (run_id, input, pos)
   order by x.pos;

  -- Without conditions and root maps nothing can happen to a root step between its creation and its start (no
  -- condition to resolve, no taskless step to cascade): it is written 'started' right away, one row version
  -- instead of two, and _send_step_tasks below sends its messages and events as if it had been started.
  v_fold := not v_conditions and v_root_maps = 0;
  insert into pgflow.step_states (flow_slug, run_id, step_slug, remaining_deps, initial_tasks, status, started_at,
                                  remaining_tasks)
  select s.flow_slug,
         x.run_id,
         s.step_slug,
         s.deps_count,
         case
           when s.step_type = 'map' and s.deps_count = 0 then jsonb_array_length(x.input)
           when s.step_type = 'map' then null
           else 1
         end,
         case when v_fold and s.deps_count = 0 then 'started' else 'created' end,
         case when v_fold and s.deps_count = 0 then now() end,
         case when v_fold and s.deps_count = 0 then 1 end
    from unnest(v_ids, start_flows.inputs) with ordinality as x (run_id, input, pos)
    cross join pgflow.steps as s
   where s.flow_slug = start_flows.flow_slug
   order by x.pos, s.step_index;

  -- run:started of every run, in input order (a new run is 'started'). The JSON payload is built only for
  -- realtime.send: the notifications carry a small envelope made from the fields.
  perform pgflow._emit_envelopes(
    array_fill('run:started'::text, array[v_n]),
    v_ids,
    array_fill(start_flows.flow_slug, array[v_n]),
    null,
    array_fill('started'::text, array[v_n]),
    case
      when pgflow._trusted_realtime_send() is not null then array(
        select jsonb_build_object(
                 'event_type', 'run:started',
                 'run_id', r.run_id,
                 'flow_slug', r.flow_slug,
                 'input', r.input,
                 'status', r.status,
                 'remaining_steps', r.remaining_steps,
                 'started_at', r.started_at)
          from unnest(v_ids) with ordinality as x (run_id, pos)
          cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
         order by x.pos)
    end);

  if v_fold and v_step_count > 0 then
    -- Every step without dependencies was inserted 'started' with one task and every other step waits for one:
    -- nothing is taskless, skipped or ready at the start, and no run can finish here. Only the started steps need
    -- their events, tasks and messages, and their fields are the steps' own: nothing is read back. (The same
    -- order as _start_ready_steps_batch: by run, then step_index.)
    select array_agg(r.run_id), array_agg(r.step_slug), array_agg(r.flow_slug), array_agg(r.queue_name),
           array_agg(r.start_delay), array_agg(1)
      into v_started_runs, v_started_slugs, v_started_flows, v_started_queues, v_started_delays, v_started_counts
      from (select k.run_id, s.step_slug, s.flow_slug, s.queue_name, coalesce(s.opt_start_delay, 0) as start_delay
              from unnest(v_ids) as k (run_id)
              cross join pgflow.steps as s
             where s.flow_slug = start_flows.flow_slug
               and s.deps_count = 0
             order by k.run_id, s.step_index) as r;
    perform pgflow._send_step_tasks(v_started_runs, v_started_slugs, v_started_flows, v_started_queues,
                                    v_started_delays, v_started_counts);
  else
    if v_conditions then
      -- As start_flow: conditions first, then taskless steps, run by run.
      for v_run in select x.run_id from unnest(v_ids) with ordinality as x (run_id, pos) order by x.pos loop
        if pgflow.cascade_resolve_conditions(v_run.run_id) then
          perform pgflow.cascade_complete_taskless_steps(v_run.run_id);
        end if;
      end loop;
    else
      -- Without conditions only runs with a ready taskless step (a root map over an empty array) have anything to
      -- cascade.
      for v_run in
        select distinct ss.run_id
          from pgflow.step_states as ss
         where ss.run_id = any (v_ids)
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
         order by ss.run_id
      loop
        perform pgflow.cascade_complete_taskless_steps(v_run.run_id);
      end loop;
    end if;

    -- Runs whose conditions failed them are no longer 'started': both calls leave them alone.
    perform pgflow._start_ready_steps_batch(v_ids);
    perform pgflow._maybe_complete_runs(v_ids);
  end if;

  -- The new runs by key, one lookup each (LIMIT keeps it one, whatever the plan's estimates).
  return query
    select r.*
      from unnest(v_ids) with ordinality as x (run_id, pos)
      cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
     order by x.pos;
end;
$$;

comment on function pgflow.start_flows(flow_slug text, inputs jsonb[], run_ids uuid[]) is $doc$
pgflow.start_flows(flow_slug, inputs, run_ids) starts one run per element of inputs in one call (one
transaction). It guarantees:
  * for every input exactly what pgflow.start_flow(flow_slug, inputs[i], run_ids[i]) guarantees: the run row
    (run_id = run_ids[i] when given, else pgflow._new_run_id(), time-ordered; remaining_steps = number of steps) and one 'created' step
    state per step, run:started, conditions resolved (flows with condition patterns resolve them run by run,
    with the same functions start_flow calls), taskless steps completed, ready steps started with tasks and
    messages, and the run completed when nothing is left;
  * set-based work: one INSERT for all runs, one for all step states, and the ready steps of all runs start
    through pgflow._start_ready_steps_batch (one pgmq.send_batch per queue and delay; root steps of a flow
    without conditions and root maps are inserted 'started' and go straight to pgflow._send_step_tasks),
    finished runs complete through pgflow._maybe_complete_runs; events of one run keep start_flow's order;
  * a flow with root map steps needs an array input for every run: SQL NULL raises
    'Flow <slug> has root map steps but input <n> is NULL', any other JSON type raises
    'Flow <slug> has root map steps but input <n> is not an array (got <type>)' (P0001, n counting from 1),
    before anything is written;
  * run_ids, when not NULL, must have one element per input (NULL elements mean new time-ordered ids), else an error
    names both lengths; an existing or repeated run id fails the whole call (runs_pkey), an unknown flow fails
    it with runs_flow_slug_fkey, a NULL input of a flow without root maps with the not-null violation on
    runs.input - the call is atomic: all runs start or none;
  * waits while the flow is being compiled or deleted (shared flow lock) and then sees the whole flow; locks the
    flow's row FOR KEY SHARE once per call (v0.20.0: the insert side of runs_flow_slug_fkey, which the schema
    leaves out; an unknown flow raises that key's 23503 error before anything is written);
  * returns the run rows as they are at the end, in the order of inputs; NULL or empty inputs start nothing.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_start_flow_with_states.sql
create or replace function pgflow.start_flow_with_states(flow_slug text, input jsonb, run_id uuid default null)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- Every statement here finds its rows by key or by address: one plan per session instead of one per call, and
-- never a sequential scan, also in the foreign-key checks its writes run, whose plans PostgreSQL caches too (a
-- plan made while a table was empty would scan it whole on every check as it grows: docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_run_id uuid;
begin
  select r.run_id
    into v_run_id
    from pgflow.start_flow(start_flow_with_states.flow_slug, start_flow_with_states.input,
                           start_flow_with_states.run_id) as r
   limit 1;

  return pgflow.get_run_with_states(v_run_id);
end;
$$;

comment on function pgflow.start_flow_with_states(flow_slug text, input jsonb, run_id uuid) is $doc$
pgflow.start_flow_with_states(flow_slug, input, run_id) guarantees: exactly pgflow.start_flow (same checks,
same errors, same effects), then returns pgflow.get_run_with_states of the new run, i.e.
{"run": <run row>, "steps": [<step state rows>]} as it is at the end of the start. SECURITY DEFINER so an
operator can grant API users this one function instead of the tables.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_get_run_with_states.sql
create or replace function pgflow.get_run_with_states(run_id uuid)
returns jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- PL/pgSQL rather than SQL (v0.20.0): PostgreSQL 15 plans the body of an SQL function that it cannot inline (this
-- one is SECURITY DEFINER and pins its search_path) on every call; PL/pgSQL keeps the plan for the session. Every
-- start of the Go client reads its run through this function: about a tenth of a lone start's CPU.
-- start_flows_with_states builds the same document for all its runs in one statement: a change here is a change
-- there (TestStartFlowsWithStatesReturnsWhatGetRunWithStatesReads compares the two).
as $$
begin
  return (
    select jsonb_build_object(
             'run', to_jsonb(r),
             'steps', coalesce(
               (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                  from pgflow.step_states as ss
                  -- A lookup per state (LIMIT keeps it one): as a join, a nested loop may read every step of every
                  -- flow for each run.
                  cross join lateral (
                    select s.step_index from pgflow.steps as s
                     where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug limit 1) as s
                 where ss.run_id = r.run_id),
               '[]'::jsonb))
      from pgflow.runs as r
     where r.run_id = get_run_with_states.run_id);
end;
$$;

comment on function pgflow.get_run_with_states(run_id uuid) is $doc$
pgflow.get_run_with_states(run_id) guarantees: one consistent read of a run and all its step states as
{"run": <runs row as jsonb>, "steps": [<step_states rows as jsonb>, ...]}, the steps in step_index order
([] when the flow has no steps); keys are the column names. Returns SQL NULL for an unknown run_id.
Changes nothing. SECURITY DEFINER so an operator can grant API users this one function instead of the tables.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_start_flows_with_states.sql
create or replace function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[])
returns setof jsonb
language plpgsql
volatile
security definer
set search_path = pg_catalog, pg_temp
set jit = off
-- As start_flow_with_states: one plan per session, never a sequential scan (docs/performance.md).
set plan_cache_mode = force_generic_plan
set enable_seqscan = off
-- Nested loops only: a hash or merge join reads one side whole, and a plan made while a table was small (a fresh
-- database, a session that began early) reads the whole table through its primary key on every later call, for as
-- long as the session keeps the plan (v0.20.0: 139,000 buffers per lone completion at 20,000 runs). Every join
-- here is by key, one lookup per row.
set enable_hashjoin = off
set enable_mergejoin = off
as $$
declare
  v_ids uuid[];
begin
  -- start_flows returns when it is done; the statement below then reads what it wrote, every run's document in one
  -- statement (v0.20.0 ninth round: a get_run_with_states call per run was a SECURITY DEFINER function call and
  -- an executor start-up per run; this is 13 % less CPU per run at 16 runs per call, docs/performance.md). The
  -- document is get_run_with_states' (its comment says what it holds): the same expression, run for the new ids
  -- in the order of inputs. It is written out here rather than shared through a function over an array of ids,
  -- which gave back most of the saving.
  select coalesce(array_agg(r.run_id order by r.ordinality), '{}')
    into v_ids
    from pgflow.start_flows(start_flows_with_states.flow_slug, start_flows_with_states.inputs) with ordinality as r;
  return query
    select jsonb_build_object(
             'run', to_jsonb(r),
             'steps', coalesce(
               (select jsonb_agg(to_jsonb(ss) order by s.step_index)
                  from pgflow.step_states as ss
                  cross join lateral (
                    select s.step_index from pgflow.steps as s
                     where s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug limit 1) as s
                 where ss.run_id = r.run_id),
               '[]'::jsonb))
      from unnest(v_ids) with ordinality as x (run_id, pos)
      cross join lateral (select r.* from pgflow.runs as r where r.run_id = x.run_id limit 1) as r
     order by x.pos;
end;
$$;

comment on function pgflow.start_flows_with_states(flow_slug text, inputs jsonb[]) is $doc$
pgflow.start_flows_with_states(flow_slug, inputs) guarantees (v0.20.0): exactly pgflow.start_flows(flow_slug,
inputs) (same checks, effects and errors; new run ids; one transaction: all runs start or none), then returns, in
the order of inputs, pgflow.get_run_with_states of each new run as it is at the end of the call. SECURITY DEFINER
like start_flow_with_states, so the role that may start runs one at a time (roles.sql's pgflow_client) may also
start several in one call: the Go client coalesces concurrent starts of one flow into one such call.
$doc$;
-- end generated

-- Roles that may start runs one at a time with start_flow_with_states may start several in one call (the Go
-- client coalesces concurrent starts into it).
select pg_temp.pgflow_v020_grant_with('pgflow.start_flow_with_states(text,jsonb,uuid)',
                                      'pgflow.start_flows_with_states(text, jsonb[])');

-- generated from sql/core: 0100_function__maybe_complete_runs.sql
create or replace function pgflow._maybe_complete_runs(run_ids uuid[])
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_events jsonb[];
begin
  if _maybe_complete_runs.run_ids is null or cardinality(_maybe_complete_runs.run_ids) = 0 then
    return;
  end if;

  with done as (
    update pgflow.runs as r
       set status = 'completed',
           completed_at = now(),
           output = (
             select jsonb_object_agg(ss.step_slug, ss.output)
               from pgflow.step_states as ss
              where ss.run_id = r.run_id
                and ss.status = 'completed'
                and not exists (
                  select 1 from pgflow.deps as d where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug))
     where r.run_id = any (_maybe_complete_runs.run_ids)
       and (r.status = 'started') is true  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
       and r.remaining_steps = 0
    returning r.run_id, r.flow_slug, r.status, r.output, r.completed_at
  )
  select array_agg(jsonb_build_object(
                     'event_type', 'run:completed',
                     'run_id', d.run_id,
                     'flow_slug', d.flow_slug,
                     'status', d.status,
                     'output', d.output,
                     'completed_at', d.completed_at) order by d.run_id)
    into v_events
    from done as d;

  perform pgflow._emit_events(v_events);
end;
$$;

comment on function pgflow._maybe_complete_runs(run_ids uuid[]) is $doc$
pgflow._maybe_complete_runs(run_ids) guarantees: for every run of run_ids exactly what
pgflow.maybe_complete_run(run_id) guarantees, done with one UPDATE for all of them: a 'started' run whose
remaining_steps is 0 becomes 'completed' (completed_at now) with output = {<leaf step slug>: <stored step
output>} over its completed leaf steps (NULL when none completed), and run:completed is emitted for it, runs in
run_id order. Runs that are completed, failed, still have steps left, or do not exist are not touched; NULL or
empty run_ids do nothing.
$doc$;
-- end generated

-- generated from sql/core: 0100_function_maybe_complete_run.sql
create or replace function pgflow.maybe_complete_run(run_id uuid)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_run pgflow.runs;
begin
  update pgflow.runs as r
     set status = 'completed',
         completed_at = now(),
         output = (
           select jsonb_object_agg(ss.step_slug, ss.output)
             from pgflow.step_states as ss
            where ss.run_id = r.run_id
              and ss.status = 'completed'
              and not exists (
                select 1 from pgflow.deps as d where d.flow_slug = r.flow_slug and d.dep_slug = ss.step_slug))
   where r.run_id = maybe_complete_run.run_id
     and (r.status = 'started') is true  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
     and r.remaining_steps = 0
  returning r.* into v_run;

  if found then
    perform pgflow._emit_event(
      jsonb_build_object(
        'event_type', 'run:completed',
        'run_id', v_run.run_id,
        'flow_slug', v_run.flow_slug,
        'status', v_run.status,
        'output', v_run.output,
        'completed_at', v_run.completed_at),
      'run:completed',
      v_run.run_id);
  end if;
end;
$$;

comment on function pgflow.maybe_complete_run(run_id uuid) is $doc$
pgflow.maybe_complete_run(run_id) guarantees: a 'started' run whose remaining_steps is 0 becomes 'completed'
(completed_at now) with output = {<leaf step slug>: <stored step output>} over the leaf steps (no dependents)
that completed (skipped leaves are absent; NULL when no leaf completed), and run:completed is emitted. Outputs
are copied as stored, so 0, false, "" and null stay exactly that. A run that is already completed or failed,
or still has steps left, is not touched (upstream only excluded 'completed').
$doc$;
-- end generated

-- generated from sql/core: 0100_function_cascade_complete_taskless_steps.sql
create or replace function pgflow.cascade_complete_taskless_steps(run_id uuid)
returns integer
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_flow_slug  text;
  v_total      integer := 0;
  v_iterations integer := 0;
  v_completed  text[];
  v_step       record;
begin
  select r.flow_slug into v_flow_slug
    from pgflow.runs as r
   where r.run_id = cascade_complete_taskless_steps.run_id
     and (r.status = 'started') is true;  -- by primary key, never through idx_runs_status (_start_ready_steps_batch)
  if v_flow_slug is null then
    return 0;
  end if;

  loop
    v_iterations := v_iterations + 1;
    if v_iterations > 50 then
      raise exception 'Cascade loop exceeded safety limit of 50 iterations (run %)',
        cascade_complete_taskless_steps.run_id;
    end if;

    exit when not pgflow.cascade_resolve_conditions(cascade_complete_taskless_steps.run_id);

    v_completed := '{}';
    for v_step in
      with done as (
        update pgflow.step_states as ss
           set status = 'completed',
               started_at = now(),
               completed_at = now(),
               remaining_tasks = 0,
               output = case when s.step_type = 'map' then '[]'::jsonb end
          from pgflow.steps as s
         where ss.run_id = cascade_complete_taskless_steps.run_id
           and ss.status = 'created'
           and ss.remaining_deps = 0
           and ss.initial_tasks = 0
           and s.flow_slug = ss.flow_slug
           and s.step_slug = ss.step_slug
        returning ss.*, s.step_index
      )
      select d.* from done as d order by d.step_index
    loop
      v_completed := v_completed || v_step.step_slug;
      perform pgflow._emit_event(
        jsonb_build_object(
          'event_type', 'step:completed',
          'run_id', v_step.run_id,
          'flow_slug', v_step.flow_slug,
          'step_slug', v_step.step_slug,
          'status', v_step.status,
          'started_at', v_step.started_at,
          'completed_at', v_step.completed_at,
          'remaining_tasks', v_step.remaining_tasks,
          'remaining_deps', v_step.remaining_deps,
          'output', v_step.output),
        'step:' || v_step.step_slug || ':completed',
        v_step.run_id);
    end loop;

    exit when cardinality(v_completed) = 0;

    update pgflow.step_states as child
       set remaining_deps = child.remaining_deps - parents.n,
           initial_tasks = case when parents.step_type = 'map' and child.status = 'created' then 0
                                else child.initial_tasks end
      from (
        select d.step_slug, s.step_type, count(*)::integer as n
          from pgflow.deps as d
          join pgflow.steps as s on s.flow_slug = d.flow_slug and s.step_slug = d.step_slug
         where d.flow_slug = v_flow_slug
           and d.dep_slug = any (v_completed)
         group by d.step_slug, s.step_type
      ) as parents
     where child.run_id = cascade_complete_taskless_steps.run_id
       and child.step_slug = parents.step_slug;

    update pgflow.runs as r
       set remaining_steps = r.remaining_steps - cardinality(v_completed)
     where r.run_id = cascade_complete_taskless_steps.run_id;

    v_total := v_total + cardinality(v_completed);
  end loop;

  return v_total;
end;
$$;

comment on function pgflow.cascade_complete_taskless_steps(run_id uuid) is $doc$
pgflow.cascade_complete_taskless_steps(run_id) guarantees:
  * completes, in waves, every step state of the run that is 'created' with remaining_deps 0 and
    initial_tasks 0 (a map over an empty array): started_at = completed_at = now(), remaining_tasks 0, output
    '[]' for maps (NULL for single steps, which are never taskless); step:completed is emitted per step in
    step_index order within a wave, and waves run in dependency order;
  * for each completed step its dependents get remaining_deps decremented, and dependent maps get
    initial_tasks 0 (their input array is empty); the run's remaining_steps drops by the number completed;
  * before every wave the conditions of ready steps are resolved (pgflow.cascade_resolve_conditions), so a step
    that becomes ready through this cascade is skipped or fails by its condition exactly like any other step
    (upstream pgflow skipped that check); if a condition fails the run, the cascade stops;
  * a run that is not 'started' is left alone; returns the number of steps completed;
  * at most 50 iterations (each wave and the final empty one count): more raises
    'Cascade loop exceeded safety limit of 50 iterations (run <run_id>)', which rolls back the caller.
The run itself is not completed here; callers call pgflow.maybe_complete_run.
$doc$;
-- end generated

do $grants$
declare
  v_grant record;
begin
  for v_grant in select g.grantee, g.proname from pg_temp.pgflow_v020_grants as g loop
    execute format('grant execute on function %s to %I',
      case v_grant.proname
        when 'complete_task' then 'pgflow.complete_task(uuid, text, integer, jsonb, integer)'
        when 'fail_task' then 'pgflow.fail_task(uuid, text, integer, text, integer, boolean, integer)'
        when 'complete_tasks' then 'pgflow.complete_tasks(uuid[], text[], integer[], jsonb[], integer[])'
        when 'create_flow' then 'pgflow.create_flow(text, integer, integer, integer, text, text)'
        when 'ensure_flow_compiled' then 'pgflow.ensure_flow_compiled(text, jsonb, boolean, text, text)'
        else 'pgflow._create_flow_from_shape(text, jsonb, text, text)'
      end,
      v_grant.grantee);
  end loop;
end;
$grants$;

-- Every function pins search_path = pg_catalog, pg_temp. An empty search_path still searches the session's
-- temporary schema first for type and table names, so a role with the default TEMP privilege could shadow uuid or
-- jsonb with a domain whose CHECK runs its own code inside a SECURITY DEFINER function, with the owner's rights.
-- The bundled PGMQ layer (not the extension, which its own upgrades manage) gets the same setting.
-- Every pgflow function also runs with JIT compilation off. A generic plan's estimated cost grows with the tables'
-- and indexes' sizes (after a prune an index keeps its pages but few entries, and each lookup looks dear), and
-- past jit_above_cost every call compiled its statements: about 30 ms for a claim that otherwise takes one
-- (docs/performance.md, "JIT compilation").
do $search_path$
declare
  v_fn record;
begin
  for v_fn in
    select p.oid::regprocedure::text as name, n.nspname = 'pgflow' as engine
      from pg_catalog.pg_proc as p
      join pg_catalog.pg_namespace as n on n.oid = p.pronamespace
     where (n.nspname = 'pgflow'
            or (n.nspname = 'pgmq'
                and pg_catalog.obj_description(n.oid, 'pg_namespace') like 'pgflow-go bundled pgmq-compatible layer%'))
       and p.prokind in ('f', 'p')
       and not exists (select 1 from pg_catalog.pg_depend as d
                        where d.classid = 'pg_catalog.pg_proc'::regclass and d.objid = p.oid and d.deptype = 'e')
     order by 1
  loop
    execute format('alter routine %s set search_path = pg_catalog, pg_temp', v_fn.name);
    if v_fn.engine then
      execute format('alter routine %s set jit = off', v_fn.name);
    end if;
  end loop;
end;
$search_path$;

-- Every function carries its guarantees as its comment (v0.20.0), so they are part of the schema.
-- generated from sql/core: comments
comment on function pgflow.is_valid_slug(slug text) is $doc$
pgflow.is_valid_slug(slug) guarantees: true exactly when slug is not NULL, not empty, at most 128 characters,
starts with an ASCII letter or underscore, continues with ASCII letters, digits or underscores, and is not the
reserved word 'run' (case-sensitive, so 'Run' is valid). Pure function; used by the slug CHECK constraints, so
it exists before the tables.
$doc$;
comment on function pgflow._default_queue_name(flow_slug text) is $doc$
pgflow._default_queue_name(flow_slug) guarantees: the canonical name of a flow's default PGMQ queue, which is
lower(flow_slug) (PGMQ names its tables in lower case, so this is also the name PGMQ's own tables use). NULL gives
NULL. Immutable and pure: the one definition of the default route. It is used only where a queue is chosen for
something that has no persisted queue yet (create_flow, add_step, the v0.17.0 backfill, the unique index
flows_default_queue_key, delete_flow_and_data for a flow without steps, and start_tasks called without a queue
by a v0.16.0 worker); it exists before the tables because that index uses it. Message operations on an existing
task never call it: they use step_tasks.queue_name.
$doc$;
comment on function pgflow._archive_task_message(p_run_id uuid, p_step_slug text, p_task_index integer) is $doc$
pgflow._archive_task_message(p_run_id, p_step_slug, p_task_index) guarantees: the task's PGMQ message (if it has
one and it is still in the queue) is moved to the archive of the queue the task stored (step_tasks.queue_name),
with one single-message pgmq.archive call. Unknown tasks and already archived messages are a no-op. Nothing
else changes.
$doc$;
comment on function pgflow._cascade_force_skip_steps(run_id uuid, step_slug text, skip_reason text) is $doc$
pgflow._cascade_force_skip_steps(run_id, step_slug, skip_reason) guarantees:
  * the step and all its transitive dependents that are still 'created' or 'started' in the run become
    'skipped' (skipped_at now, remaining_tasks NULL); the trigger step gets skip_reason, every other step
    'dependency_skipped'; steps already terminal (including an already skipped trigger) are left alone;
  * step:skipped is emitted per newly skipped step in step_index order (a topological order);
  * the queued/started messages of the newly skipped steps' tasks are archived from the queues the tasks stored
    (step_tasks.queue_name), one batch pgmq.archive call per queue; their task rows keep their status (late
    callbacks are ignored by complete_task/fail_task);
  * the run's remaining_steps drops by the number newly skipped, which is returned (a second call returns 0).
It does not look at the run status and does not decrement remaining_deps (every dependent is skipped anyway).
Unknown run: raises 'Run not found: <run_id>'.
$doc$;
comment on function pgflow._compare_flow_shapes(p_local jsonb, p_db jsonb) is $doc$
pgflow._compare_flow_shapes(p_local, p_db) guarantees: the list of structural differences between two flow
shapes, '{}' when they match. p_local is called "first", p_db "second". Reported, in this order:
  * 'Step count differs: <n_local> vs <n_db>' when the step arrays differ in length (missing steps = []);
  * per index i: a step missing on one side, else differences of slug, type, dependencies (as the sorted list),
    whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern, one line each.
A key missing on either side is not a difference for slug/stepType/whenUnmet/whenExhausted (pgflow compares
those with SQL "<>", where NULL never differs); for the two patterns a missing key differs from
{"defined": false} and prints as ''. Options are never compared. Read-only.
$doc$;
comment on function pgflow._get_flow_shape(p_flow_slug text) is $doc$
pgflow._get_flow_shape(p_flow_slug) guarantees: the structural shape of a stored flow as jsonb
{"steps": [...]}, steps in step_index order, each with slug, stepType, dependencies (sorted by code point,
[] when none), whenUnmet, whenExhausted, requiredInputPattern and forbiddenInputPattern (each
{"defined": false} or {"defined": true, "value": <pattern>}). Options are not part of a shape. An unknown flow
gives {"steps": []}. Read-only.
$doc$;
comment on function pgflow.calculate_retry_delay(base_delay numeric, attempts_count integer) is $doc$
pgflow.calculate_retry_delay(base_delay, attempts_count) guarantees: the exponential backoff in whole seconds,
floor(base_delay * 2^attempts_count), capped at 2147483647 (the largest integer, about 68 years) instead of
failing with "integer out of range". A base_delay of 0 or less gives 0; NULL arguments give NULL.
The exponent is clamped to +-60000 so numeric arithmetic cannot overflow: 2^60000 times the smallest positive
numeric is still far above the cap, so positive exponents stay exact; negative exponents (pgflow never passes
them, attempts_count is never negative) are exact for every base_delay below 10^16000.
$doc$;
comment on function pgflow.is_local() is $doc$
pgflow.is_local() guarantees: true exactly when this session runs against a local development database, which
pgflow-go recognises in two ways:
  * the custom setting pgflow.environment is 'local' (set by `pgflow dev` / the demo, or by an operator with
    `alter database ... set pgflow.environment = 'local'`);
  * the setting app.settings.jwt_secret holds the fixed JWT secret of a local Supabase CLI stack (as pgflow does).
Missing settings count as "not local". Used by ensure_flow_compiled to allow destructive recompilation.
$doc$;
comment on function pgflow.mark_worker_stopped(worker_id uuid) is $doc$
pgflow.mark_worker_stopped(worker_id) guarantees: the worker is recorded as gone after a graceful shutdown:
stopped_at and last_heartbeat_at become one and the same clock_timestamp(), and deprecated_at is set to it too
unless an operator set it earlier (so no keep-alive logic counts the worker as alive). An unknown worker_id
changes nothing.
$doc$;
comment on function pgflow.poll_for_tasks(queue_name text, vt integer, qty integer, max_poll_seconds integer, poll_interval_ms integer) is $doc$
pgflow.poll_for_tasks(...) guarantees: nothing. It is a deprecated stub kept so that very old workers calling it
get a NOTICE telling them to upgrade instead of an "undefined function" error; it returns no rows and changes
nothing. Current workers read with pgmq.read_with_poll and claim with pgflow.start_tasks.
$doc$;
comment on function pgflow.set_vt_batch(queue_name text, msg_ids bigint[], vt_offsets integer[]) is $doc$
pgflow.set_vt_batch(queue_name, msg_ids, vt_offsets) guarantees: for each pair (msg_ids[i], vt_offsets[i]) the
message in queue queue_name becomes invisible until clock_timestamp() + vt_offsets[i] seconds (0 = visible now),
in one statement; read_ct is unchanged. Returns the updated messages; ids not in the queue are not returned.
NULL or empty arrays change nothing and return no rows. Arrays of different lengths raise
'msg_ids length (<a>) must equal vt_offsets length (<b>)'; an unknown queue raises
'relation "pgmq.q_<name>" does not exist' (42P01). PGMQ has no batch set_vt, so this is one of the two places
that update a PGMQ queue table directly (the table name comes from pgmq.format_table_name, which validates it).
$doc$;
comment on function pgflow.track_worker_function(function_name text) is $doc$
pgflow.track_worker_function(function_name) guarantees: a worker_functions row for function_name exists
afterwards; a new row gets the table defaults, an existing one only has updated_at refreshed to
clock_timestamp() (enabled, debounce and last_invoked_at are left alone).
$doc$;
-- end generated

drop function pg_temp.pgflow_v020_grant_with(text, text);
