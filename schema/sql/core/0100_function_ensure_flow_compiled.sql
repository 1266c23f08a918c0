create or replace function pgflow.ensure_flow_compiled(
  flow_slug         text,
  shape             jsonb,
  allow_data_loss   boolean default false,
  queue_mode        text    default null,
  message_retention text    default null
)
returns jsonb
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set jit = off
as $$
declare
  v_differences text[];
  v_mode        text := coalesce(ensure_flow_compiled.queue_mode, 'flow');
  v_stored_mode text;
  v_stored_retention text;
begin
  if v_mode not in ('flow', 'step') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": queue_mode must be ''flow'' or ''step'', got ''%s''',
        ensure_flow_compiled.flow_slug, v_mode);
  end if;
  if ensure_flow_compiled.message_retention not in ('archive', 'delete') then
    raise exception using
      errcode = '22023',
      message = format('Flow "%s": message_retention must be ''archive'' or ''delete'', got ''%s''',
        ensure_flow_compiled.flow_slug, ensure_flow_compiled.message_retention);
  end if;
  perform pgflow._validate_flow_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape);
  perform pg_advisory_xact_lock(1, hashtext(lower(ensure_flow_compiled.flow_slug)));

  select f.queue_mode, f.message_retention into v_stored_mode, v_stored_retention
    from pgflow.flows as f where f.flow_slug = ensure_flow_compiled.flow_slug;
  if not found then
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape, v_mode,
                                          ensure_flow_compiled.message_retention);
    return jsonb_build_object('status', 'compiled', 'differences', '[]'::jsonb);
  end if;

  -- The message retention only decides what a claim does with a message (every other path handles both), so it
  -- is set in place, whatever the shapes say; only a change writes (a worker role needs UPDATE on that column
  -- only then: roles.sql grants it).
  if ensure_flow_compiled.message_retention <> v_stored_retention then
    update pgflow.flows as f
       set message_retention = ensure_flow_compiled.message_retention
     where f.flow_slug = ensure_flow_compiled.flow_slug;
  end if;

  -- The queue mode is deployment metadata, compared apart from the DAG shape but with the same consequences.
  v_differences := pgflow._compare_flow_shapes(
    ensure_flow_compiled.shape, pgflow._get_flow_shape(ensure_flow_compiled.flow_slug));
  if v_stored_mode <> v_mode then
    v_differences := format('Queue mode differs: ''%s'' vs ''%s''', v_mode, v_stored_mode) || v_differences;
  end if;

  if cardinality(v_differences) = 0 then
    return jsonb_build_object('status', 'verified', 'differences', '[]'::jsonb);
  end if;

  if pgflow.is_local() or coalesce(ensure_flow_compiled.allow_data_loss, false) then
    perform pgflow.delete_flow_and_data(ensure_flow_compiled.flow_slug);
    perform pgflow._create_flow_from_shape(ensure_flow_compiled.flow_slug, ensure_flow_compiled.shape, v_mode,
                                          ensure_flow_compiled.message_retention);
    return jsonb_build_object('status', 'recompiled', 'differences', to_jsonb(v_differences));
  end if;

  return jsonb_build_object('status', 'mismatch', 'differences', to_jsonb(v_differences));
end;
$$;

comment on function pgflow.ensure_flow_compiled(flow_slug text, shape jsonb, allow_data_loss boolean, queue_mode text, message_retention text) is $doc$
pgflow.ensure_flow_compiled(flow_slug, shape, allow_data_loss, queue_mode, message_retention) guarantees: after it
returns, the stored flow has the caller's shape and queue mode (NULL = 'flow'; anything but 'flow' or 'step' is
refused with 22023 before anything is read), or nothing was changed and the result says why. message_retention
(v0.20.0; 'archive' or 'delete', anything else refused with 22023 before anything is read) is stored as given in
every outcome, also 'verified' and 'mismatch': it decides only what a claim does with a task's message, which is
safe to change at any time, so it is never a difference; NULL keeps the stored value ('archive' for a new
flow); only a change writes (UPDATE of flows.message_retention, which roles.sql grants pgflow_worker). Result:
{"status": s, "differences": [...]}
  * 'compiled'   - the flow did not exist and was created from the shape (in any environment);
  * 'verified'   - the stored shape equals the caller's; nothing changed;
  * 'recompiled' - shapes differed and pgflow.is_local() or allow_data_loss: the flow and ALL its data (runs,
                   states, tasks, queue and archive) were deleted and the flow created again from the shape;
  * 'mismatch'   - shapes differed otherwise; nothing changed.
A shape the DSL could not produce (NULL, not an object, duplicate step slugs, maxAttempts 0, ...) is refused by
pgflow._validate_flow_shape (22023, naming the bad value) before anything is read or changed (v0.20.0).
differences lists 'Queue mode differs: ''<caller>'' vs ''<stored>''' first when the queue modes differ (v0.20.0; the
mode is compared apart from the DAG shape, with the same consequences), then _compare_flow_shapes(shape, stored
shape) (the caller's shape is "first"). Switching a flow's queue mode therefore recompiles it only where a shape
change would.
Concurrent calls for one normalized slug (and create_flow / delete_flow_and_data for it) are serialised by the
transaction-level advisory lock (1, hashtext(lower(flow_slug))), so slugs differing only in letter case share it.
$doc$;
