-- Registry of queues. queue_name keeps the spelling the caller used in create; the physical tables use
-- the lower-cased name, so two spellings of one name share tables but have one row each here.
create table pgmq.meta (
    queue_name varchar unique not null,
    is_partitioned boolean not null,
    is_unlogged boolean not null,
    created_at timestamptz not null default now()
);
