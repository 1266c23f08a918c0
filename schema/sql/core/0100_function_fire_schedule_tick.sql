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
