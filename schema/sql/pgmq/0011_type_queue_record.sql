-- One queue as returned by list_queues: the row of pgmq.meta.
create type pgmq.queue_record as (
    queue_name varchar,
    is_partitioned boolean,
    is_unlogged boolean,
    created_at timestamptz
);
