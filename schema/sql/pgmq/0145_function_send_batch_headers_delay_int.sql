-- Enqueues msgs with matching headers, invisible for delay seconds; returns the msg_ids in array order.
create function pgmq.send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer)
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send_batch(queue_name, msgs, headers, clock_timestamp() + make_interval(secs => delay));
$body$;
