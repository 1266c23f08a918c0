create or replace function pgflow._archive_task_message(p_run_id uuid, p_step_slug text, p_task_index integer)
returns void
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_queue_name text;
  v_message_id bigint;
begin
  select t.queue_name, t.message_id
    into v_queue_name, v_message_id
    from pgflow.step_tasks as t
   where t.run_id = p_run_id
     and t.step_slug = p_step_slug
     and t.task_index = p_task_index;

  if v_message_id is not null then
    perform pgmq.archive(v_queue_name, v_message_id);
  end if;
end;
$$;

comment on function pgflow._archive_task_message(p_run_id uuid, p_step_slug text, p_task_index integer) is $doc$
pgflow._archive_task_message(p_run_id, p_step_slug, p_task_index) guarantees: the task's PGMQ message (if it has
one and it is still in the queue) is moved to the archive of the queue the task stored (step_tasks.queue_name),
with one single-message pgmq.archive call. Unknown tasks and already archived messages are a no-op. Nothing
else changes.
$doc$;
