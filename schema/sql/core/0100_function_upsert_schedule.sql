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
