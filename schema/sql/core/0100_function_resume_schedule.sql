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
