-- Returns the physical table name for a queue: lower(prefix || '_' || queue_name), e.g. ('MyQueue', 'q') -> 'q_myqueue'.
-- Guarantees: a name containing '$', ';', '--' or a single quote is rejected with PGMQ's error text (the bad name is
-- in the DETAIL), so the result is always safe to pass through format('%I').
create function pgmq.format_table_name(queue_name text, prefix text)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
begin
    if strpos(format_table_name.queue_name, '$') > 0
        or strpos(format_table_name.queue_name, ';') > 0
        or strpos(format_table_name.queue_name, '--') > 0
        or strpos(format_table_name.queue_name, '''') > 0
    then
        raise exception 'queue name contains invalid characters: $, ;, --, or \'''
            using detail = format('queue name: %s', format_table_name.queue_name);
    end if;
    return lower(format_table_name.prefix || '_' || format_table_name.queue_name);
end;
$body$;
