-- Enqueues every element of msgs, visible at once, without headers; returns the msg_ids in array order.
create function pgmq.send_batch(queue_name text, msgs jsonb[])
returns setof bigint
language sql
set search_path = pg_catalog, pg_temp
as $body$
    select pgmq.send_batch(queue_name, msgs, null::jsonb[], clock_timestamp());
$body$;
