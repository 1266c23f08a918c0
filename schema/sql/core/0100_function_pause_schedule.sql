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
