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
