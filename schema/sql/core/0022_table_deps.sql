-- pgflow.deps: the edges of a flow's DAG; step_slug depends on dep_slug. Both ends must be existing steps of
-- the same flow, and a step cannot depend on itself.
create table pgflow.deps (
  flow_slug  text        not null,
  dep_slug   text        not null,
  step_slug  text        not null,
  created_at timestamptz not null default now(),
  constraint deps_pkey primary key (flow_slug, dep_slug, step_slug),
  constraint deps_flow_slug_fkey foreign key (flow_slug) references pgflow.flows (flow_slug),
  constraint deps_flow_slug_dep_slug_fkey foreign key (flow_slug, dep_slug)
    references pgflow.steps (flow_slug, step_slug),
  constraint deps_flow_slug_step_slug_fkey foreign key (flow_slug, step_slug)
    references pgflow.steps (flow_slug, step_slug),
  constraint deps_check check (dep_slug <> step_slug)
);

create index idx_deps_by_flow_step on pgflow.deps (flow_slug, step_slug);
create index idx_deps_by_flow_dep on pgflow.deps (flow_slug, dep_slug);
