-- Creates a logged, non-partitioned queue (same as create_non_partitioned). Guarantees: idempotent.
create function pgmq.create(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    perform pgmq.create_non_partitioned("create".queue_name);
end;
$body$;
