-- Monitoring roles may read every pgmq table and sequence, including queue tables created later.
grant usage on schema pgmq to pg_monitor;
grant select on all tables in schema pgmq to pg_monitor;
grant select on all sequences in schema pgmq to pg_monitor;
alter default privileges in schema pgmq grant select on tables to pg_monitor;
alter default privileges in schema pgmq grant select on sequences to pg_monitor;
