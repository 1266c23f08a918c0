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
