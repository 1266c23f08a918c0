-- Creates a logged, non-partitioned queue. Guarantees: idempotent; name rules of format_table_name and
-- validate_queue_name apply; a meta row with the caller's spelling exists afterwards.
create function pgmq.create_non_partitioned(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    perform pgmq._bundled_create_queue(create_non_partitioned.queue_name, false);
end;
$body$;
