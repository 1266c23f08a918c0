-- Enqueues one message without headers, invisible for delay seconds; returns its msg_id.
create function pgmq.send(queue_name text, msg jsonb, delay integer)
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send(queue_name, msg, null::jsonb, clock_timestamp() + make_interval(secs => delay));
$body$;
