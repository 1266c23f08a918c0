-- Drops a queue's tables and the meta row of exactly this spelling; returns true.
-- Guarantees (as the PGMQ 1.5 extension behaves): a queue whose table pgmq.q_<lower(name)> does not exist raises
-- 'relation "pgmq.q_<name>" does not exist' (SQLSTATE 42P01) and changes nothing; dropping with another spelling of a
-- mixed-case name drops the shared tables but deletes only the meta row of the spelling given.
create function pgmq.drop_queue(queue_name text)
returns boolean
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(drop_queue.queue_name, 'q');
    atable text := pgmq.format_table_name(drop_queue.queue_name, 'a');
begin
    if to_regclass(format('pgmq.%I', qtable)) is null then
        raise exception 'relation "pgmq.%" does not exist', qtable
            using errcode = 'undefined_table',
                  hint = format('queue %s does not exist; pgmq.list_queues() shows the existing queues',
                                drop_queue.queue_name);
    end if;
    if to_regclass(format('pgmq.%I', atable)) is null then
        raise exception 'relation "pgmq.%" does not exist', atable
            using errcode = 'undefined_table';
    end if;

    execute format('drop table if exists pgmq.%I', qtable);
    execute format('drop table if exists pgmq.%I', atable);

    delete from pgmq.meta m where m.queue_name = drop_queue.queue_name;

    return true;
end;
$body$;
