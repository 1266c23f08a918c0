-- Deprecated two-argument form kept for PGMQ compatibility: warns, then behaves exactly like drop_queue(queue_name).
create function pgmq.drop_queue(queue_name text, partitioned boolean)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    raise warning 'drop_queue(queue_name, partitioned) is deprecated and will be removed in PGMQ v2.0. Use drop_queue(queue_name) instead';
    perform pgmq.drop_queue(drop_queue.queue_name);
    return true;
end;
$body$;
