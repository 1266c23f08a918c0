create or replace function pgflow._wake_queue(queue_name text, delay_seconds integer)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  if coalesce(_wake_queue.delay_seconds, 0) <= 0 then
    perform pgflow._notify(array['pgflow:queue:' || _wake_queue.queue_name], array['']);
  else
    perform pgflow._notify_queue_visible_at(_wake_queue.queue_name,
                                            clock_timestamp() + make_interval(secs => _wake_queue.delay_seconds));
  end if;
end;
$$;

comment on function pgflow._wake_queue(queue_name text, delay_seconds integer) is $doc$
pgflow._wake_queue(queue_name, delay_seconds) guarantees (v0.20.0): tells the workers listening on
'pgflow:queue:<queue_name>' that messages were just sent to that queue (or made visible again) with the given
delay: payload '' (read now) for a delay of 0 or less or NULL, else pgflow._notify_queue_visible_at with
clock_timestamp() + delay, which is never earlier than the visibility the messages got a moment before. The
functions that send task messages (start_ready_steps, _start_ready_steps_batch, retry_run) wake workers through
it; fail_task announces its message's exact retry time itself. Notifications go out at commit; PostgreSQL folds
identical ones of a transaction.
$doc$;
