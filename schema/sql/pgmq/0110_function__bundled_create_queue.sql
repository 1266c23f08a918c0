-- Internal to the bundled layer (not part of PGMQ's API): creates queue table pgmq.q_<name> (unlogged when asked),
-- archive table pgmq.a_<name>, their indexes, and the pgmq.meta row for the caller's spelling.
-- Guarantees: idempotent (existing tables, indexes and meta rows are kept as they are); the name is checked for bad
-- characters first and for length second, as PGMQ does; physical layout matches PGMQ 1.5's non-partitioned queues.
create function pgmq._bundled_create_queue(queue_name text, unlogged boolean)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $body$
declare
    qtable text := pgmq.format_table_name(_bundled_create_queue.queue_name, 'q');
    atable text := pgmq.format_table_name(_bundled_create_queue.queue_name, 'a');
begin
    perform pgmq.validate_queue_name(_bundled_create_queue.queue_name);

    execute format(
        $ddl$
        create %s table if not exists pgmq.%I (
            msg_id bigint primary key generated always as identity,
            read_ct integer not null default 0,
            enqueued_at timestamptz not null default now(),
            vt timestamptz not null,
            message jsonb,
            headers jsonb
        )
        $ddl$,
        case when _bundled_create_queue.unlogged then 'unlogged' else '' end,
        qtable);

    execute format(
        $ddl$
        create table if not exists pgmq.%I (
            msg_id bigint primary key,
            read_ct integer not null default 0,
            enqueued_at timestamptz not null default now(),
            archived_at timestamptz not null default now(),
            vt timestamptz not null,
            message jsonb,
            headers jsonb
        )
        $ddl$,
        atable);

    execute format('create index if not exists %I on pgmq.%I (vt)', qtable || '_vt_idx', qtable);
    -- PGMQ names the archive index after the caller's spelling, not the lower-cased table name.
    execute format('create index if not exists %I on pgmq.%I (archived_at)',
                   'archived_at_idx_' || _bundled_create_queue.queue_name, atable);

    insert into pgmq.meta (queue_name, is_partitioned, is_unlogged)
    values (_bundled_create_queue.queue_name, false, _bundled_create_queue.unlogged)
    on conflict do nothing;
end;
$body$;
