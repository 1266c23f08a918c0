-- Removes every message from the queue table (not from the archive) and returns how many there were.
-- Guarantees: message ids keep counting up afterwards (the identity is not reset); unknown queue raises 42P01.
create function pgmq.purge_queue(queue_name text)
returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(purge_queue.queue_name, 'q');
    removed bigint;
begin
    execute format('select count(*) from pgmq.%I', qtable) into removed;
    execute format('truncate table pgmq.%I', qtable);
    return removed;
end;
$body$;
