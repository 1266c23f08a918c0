-- Schema pgmq for the bundled, SQL-only PGMQ-compatible layer.
-- The comment is the marker schema.InstallPGMQ looks for to recognise a bundled install.
create schema if not exists pgmq;

comment on schema pgmq is 'pgflow-go bundled pgmq-compatible layer 1.5';
