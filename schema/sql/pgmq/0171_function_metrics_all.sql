-- metrics for every row of pgmq.meta (one result per spelling, in no particular order).
create function pgmq.metrics_all()
returns setof pgmq.metrics_result
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    registered record;
begin
    for registered in select m.queue_name from pgmq.meta m loop
        return next pgmq.metrics(registered.queue_name);
    end loop;
end;
$body$;
