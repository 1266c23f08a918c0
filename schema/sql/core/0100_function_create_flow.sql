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
