// Package pgflow defines and runs workflows (DAGs of steps) whose state and queues live in PostgreSQL.
//
// Define a flow with NewFlow and add typed steps with Step, Map and MapInput; each returns a StepHandle[O]
// that later steps name in DependsOn and read with Output, so a wrong dependency is a compile error.
// Options (MaxAttempts, BaseDelay, Timeout, StartDelay, If, IfNot, WhenUnmet, WhenExhausted) are validated at
// definition time, and every mistake is reported by Flow.Err naming the flow, the step and the bad value.
// Shape and CompileSQL give the definition to the database; the SQL functions in schema pgflow do all the
// orchestration, and a worker claims tasks and runs their handlers.
package pgflow
