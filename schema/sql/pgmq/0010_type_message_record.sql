-- One queue message as returned by read, read_with_poll, pop and set_vt (PGMQ 1.5 shape, headers included).
create type pgmq.message_record as (
    msg_id bigint,
    read_ct integer,
    enqueued_at timestamptz,
    vt timestamptz,
    message jsonb,
    headers jsonb
);
