-- pgflow.delete_flow_and_data(p_flow_slug) guarantees: removes the flow completely in the caller's transaction:
-- its PGMQ queue with its archive (when the queue exists), then all of its step_tasks, step_states, runs, deps,
-- steps and the flow row. Destructive and irreversible; meant for development and for recompiling a changed
-- flow. Workers rows are not touched. An unknown flow (or one whose queue is already gone) is not an error.
create or replace function pgflow.delete_flow_and_data(p_flow_slug text)
returns void
language plpgsql
volatile
set search_path = ''
as $$
begin
  if exists (select 1 from pgmq.list_queues() as q where q.queue_name = p_flow_slug) then
    perform pgmq.drop_queue(p_flow_slug);
  end if;

  delete from pgflow.step_tasks as t where t.flow_slug = p_flow_slug;
  delete from pgflow.step_states as ss where ss.flow_slug = p_flow_slug;
  delete from pgflow.runs as r where r.flow_slug = p_flow_slug;
  delete from pgflow.deps as d where d.flow_slug = p_flow_slug;
  delete from pgflow.steps as s where s.flow_slug = p_flow_slug;
  delete from pgflow.flows as f where f.flow_slug = p_flow_slug;
end;
$$;
