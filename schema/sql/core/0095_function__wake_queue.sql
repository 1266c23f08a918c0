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
