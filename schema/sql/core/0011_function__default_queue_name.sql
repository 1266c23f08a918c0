create or replace function pgflow._default_queue_name(flow_slug text)
returns text
language sql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
set jit = off
as $$
  select lower(flow_slug);
$$;

comment on function pgflow._default_queue_name(flow_slug text) is $doc$
pgflow._default_queue_name(flow_slug) guarantees: the canonical name of a flow's default PGMQ queue, which is
lower(flow_slug) (PGMQ names its tables in lower case, so this is also the name PGMQ's own tables use). NULL gives
NULL. Immutable and pure: the one definition of the default route. It is used only where a queue is chosen for
something that has no persisted queue yet (create_flow, add_step, the v0.17.0 backfill, the unique index
flows_default_queue_key, delete_flow_and_data for a flow without steps, and start_tasks called without a queue
by a v0.16.0 worker); it exists before the tables because that index uses it. Message operations on an existing
task never call it: they use step_tasks.queue_name.
$doc$;
