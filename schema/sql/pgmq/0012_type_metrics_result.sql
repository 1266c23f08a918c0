-- Queue statistics as returned by metrics and metrics_all.
create type pgmq.metrics_result as (
    queue_name text,
    queue_length bigint,
    newest_msg_age_sec integer,
    oldest_msg_age_sec integer,
    total_messages bigint,
    scrape_time timestamptz,
    queue_visible_length bigint
);
