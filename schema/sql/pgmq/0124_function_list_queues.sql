-- Returns every row of pgmq.meta: one per spelling passed to create, in no particular order.
create function pgmq.list_queues()
returns setof pgmq.queue_record
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    return query
        select m.queue_name, m.is_partitioned, m.is_unlogged, m.created_at
        from pgmq.meta m;
end;
$body$;
