-- Deletes the listed messages from the queue table for good and returns the ids deleted.
-- Guarantees: ids not in the queue are skipped silently (fewer rows come back, no error).
create function pgmq.delete(queue_name text, msg_ids bigint[])
returns setof bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(delete.queue_name, 'q');
begin
    return query execute format('delete from pgmq.%I q where q.msg_id = any($1) returning q.msg_id', qtable)
        using delete.msg_ids;
end;
$body$;
