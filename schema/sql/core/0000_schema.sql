-- Schema pgflow holds every table, type and function of the pgflow engine.
-- "if not exists": the migrator keeps its version table in this schema and may create it first.
create schema if not exists pgflow;

comment on schema pgflow is 'pgflow-go workflow engine: flow definitions, runs, step states, tasks and their orchestration functions';
