-- pgflow.read_task_record: one message read by pgflow.read_and_start_tasks (v0.20.0) and, when it was claimed, its
-- task. claimed is false for a message read but not claimed; its task columns are NULL then. attempt, timeout and
-- max_attempts are what a worker needs besides pgflow.step_task_record's columns (the claim's attempt number, the
-- step's effective timeout in seconds and its effective max attempts).
create type pgflow.read_task_record as (
  msg_id       bigint,
  claimed      boolean,
  flow_slug    text,
  run_id       uuid,
  step_slug    text,
  input        jsonb,
  task_index   int,
  flow_input   jsonb,
  attempt      int,
  timeout      int,
  max_attempts int
);
