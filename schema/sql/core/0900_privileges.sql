-- pgflow ships with no privileges for ordinary roles: nobody but the owner (and superusers) may use the schema.
-- Orchestration functions trust their callers, so access is an operator decision: grant usage on the schema and
-- execute on the functions a role needs (for example start_flow_with_states, get_run_with_states) explicitly.
revoke all on schema pgflow from public;
