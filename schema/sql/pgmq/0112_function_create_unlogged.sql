-- Creates a queue whose queue table is unlogged (the archive stays logged). Guarantees: idempotent; an existing
-- queue table keeps its persistence; the meta row for this spelling records is_unlogged = true.
create function pgmq.create_unlogged(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    perform pgmq._bundled_create_queue(create_unlogged.queue_name, true);
end;
$body$;
