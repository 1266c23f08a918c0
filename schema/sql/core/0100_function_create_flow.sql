-- pgflow.create_flow(flow_slug, max_attempts, base_delay, timeout) guarantees:
--   * idempotent: the first call inserts the flow (NULL options become max_attempts 3, base_delay 5, timeout 60);
--     later calls return the existing row unchanged (options are NOT updated);
--   * the flow's PGMQ queue, named exactly flow_slug, exists afterwards (also for a flow without steps);
--   * a valid slug that cannot name a PGMQ queue (more than 47 characters) is rejected before anything is written,
--     and so is a slug that differs only in letter case from an existing flow or queue (PGMQ lower-cases its
--     table names, so the two would share one queue table);
--   * invalid slugs and options fail on the flows CHECK constraints (slug_is_valid, opt_*).
create or replace function pgflow.create_flow(
  flow_slug    text,
  max_attempts integer default null,
  base_delay   integer default null,
  timeout      integer default null
)
returns pgflow.flows
language plpgsql
volatile
set search_path = ''
as $$
declare
  v_flow  pgflow.flows;
  v_clash text;
begin
  if pgflow.is_valid_slug(create_flow.flow_slug) then
    if length(create_flow.flow_slug) > 47 then
      raise exception using
        errcode = '22023',
        message = format(
          'Flow slug "%s" is %s characters long, but a flow slug also names the flow''s PGMQ queue, which allows at most 47',
          create_flow.flow_slug, length(create_flow.flow_slug)),
        hint = 'Choose a flow slug of at most 47 characters.';
    end if;

    select c.name into v_clash
    from (
      select f.flow_slug as name from pgflow.flows as f
      union
      select q.queue_name from pgmq.list_queues() as q
    ) as c
    where lower(c.name) = lower(create_flow.flow_slug)
      and c.name <> create_flow.flow_slug
    order by c.name
    limit 1;

    if v_clash is not null then
      raise exception using
        errcode = '23505',
        message = format(
          'Flow slug "%s" differs only in letter case from existing flow or queue "%s"; PGMQ queue tables are named in lower case, so both would share one queue',
          create_flow.flow_slug, v_clash),
        hint = 'Choose a flow slug that differs in more than letter case.';
    end if;
  end if;

  insert into pgflow.flows as f (flow_slug, opt_max_attempts, opt_base_delay, opt_timeout)
  values (
    create_flow.flow_slug,
    coalesce(create_flow.max_attempts, 3),
    coalesce(create_flow.base_delay, 5),
    coalesce(create_flow.timeout, 60)
  )
  on conflict on constraint flows_pkey do update set flow_slug = f.flow_slug
  returning f.* into v_flow;

  if not exists (select 1 from pgmq.list_queues() as q where q.queue_name = create_flow.flow_slug) then
    perform pgmq.create(create_flow.flow_slug);
  end if;

  return v_flow;
end;
$$;
