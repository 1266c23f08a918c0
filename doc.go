/*
Package pgflow runs workflows — directed acyclic graphs of typed steps — whose state and queues live in
PostgreSQL. SQL functions in schema pgflow make every state transition in one transaction (start a run, make steps
ready, fan out map tasks, claim, complete, retry, fail, finish the run); this package gives them a typed Go DSL, a
worker that runs your handlers, and a client that starts, lists, waits for and watches runs. Nothing but
PostgreSQL is needed: no broker, no orchestrator service.

# Defining a flow

A flow has an input type and steps. [NewFlow] starts one; [Step], [Map] and [MapInput] add steps and return a
[StepHandle] whose type parameter is the step's output type:

	type Order struct{ ID int; Items []string }

	f := pgflow.NewFlow[Order]("process_order", pgflow.MaxAttempts(3))
	charge := pgflow.Step(f, "charge", func(ctx context.Context, t *pgflow.Task[Order]) (Receipt, error) {
		o, err := t.FlowInput(ctx)
		if err != nil {
			return Receipt{}, err
		}
		return payments.Charge(ctx, o.ID)
	})
	pgflow.Step(f, "email", func(ctx context.Context, t *pgflow.Task[Order]) (bool, error) {
		r, err := charge.Output(t) // the dependency's output, typed as Receipt
		...
	}, pgflow.DependsOn(charge))

What is checked when: the compiler checks the types — a handler's input type matches its flow's, Output returns
the dependency's output type, a [Map] step's item type is the element type of the slice it maps over, and an option
that only steps take ([StepOnlyOption]: [DependsOn], [StartDelay], [If], [IfNot], [WhenUnmet], [WhenExhausted])
cannot be given to [NewFlow]. Everything else — slugs, option values, a dependency on a step of another flow, a
cycle-free order — is checked when the step is defined and reported by [Flow.Err], naming the flow, the step and the
bad value; a [Worker] refuses to start a flow with definition errors. Reading a handle that is not a declared
dependency is a runtime error ([ErrNotDependency]) that fails the task without retry.

The flow's shape (steps, dependencies, types, conditions) lives in the database too. A worker compiles it at
startup ([pgflow.ensure_flow_compiled]); [Client.EnsureFlow] does the same from a client, and [Flow.CompileSQL]
gives the statements for a migration. A stored flow that differs from the code is a [*ShapeMismatchError] naming
each difference, unless the database is local or data loss is allowed.

# Running flows: the worker

A [Worker] serves one or more flows. It reads their queues, claims tasks, runs handlers with bounded concurrency
(one pool of handler slots for all its flows, optionally a smaller share per flow) and records the results:

	client, err := pgflow.NewClient(pool, nil)
	w, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows:         []pgflow.WorkerFlow{{Flow: orders}, {Flow: emails, MaxConcurrent: 5}},
		MaxConcurrent: 20,
	})
	err = w.Run(ctx) // until ctx is cancelled; then a graceful, bounded shutdown

A flow shares one queue among its steps unless it is defined with [QueuePerStep]: then each step has a private
queue, and [WorkerFlow].Steps lets a worker (or several, on other machines) serve chosen steps with their own
concurrency, so a slow step with a deep backlog does not delay the others (docs/queues.md). A flow defined with
[DeleteTaskMessages] has its task messages deleted when they are claimed instead of archived when the task
finishes: two rows fewer per task, at the price of the archive's copy of each message.

A handler's context carries its step's timeout as the deadline; when the deadline passes before the handler
returns, the attempt is recorded as timed out and retried per the step's policy. Return [Permanent] to fail a task without retry. Every result is fenced by the attempt
that produced it: a late report from an attempt that was recovered and claimed again changes nothing
([Hooks].StaleResult reports it). Tasks interrupted by a shutdown go back to their queue without spending an
attempt. [Worker.Start] and [Worker.Stop] give the same lifecycle in two calls; signal handling is the caller's
(see examples/).

[NewSchedule] starts a flow on a cron timetable with a fixed input ([WorkerConfig].Schedules): workers write the
schedules to the database and fire their ticks, one worker at a time, one run per tick (its id derived from the
schedule and the tick), with a per-schedule policy for ticks missed while no worker ran. [Client.ListSchedules],
[Client.PauseSchedule] and [Client.ResumeSchedule] manage them; see docs/schedules.md.

# Starting and following runs: the client

[StartRun] starts a run with a typed input ([StartRunTx] inside your transaction, [StartRuns] many at once);
[StartOpts].RunID makes a start idempotent. [Client.GetRun] reads a run with its step states, [Client.WaitRun]
waits for it to finish, [Client.Subscribe] streams its [Event] values, and [Client.ListRuns] lists runs with
filters and a cursor. [RunOutput] and [StepOutput] decode outputs into Go types. A Client and the Workers built on
it share one LISTEN connection per process.

# Configuration

Long-lived objects take a *Config ([ClientConfig], [WorkerConfig]); calls take a nil-able *Opts ([StartOpts],
[StartRunsOpts], [EnsureFlowOpts], [ListRunsOpts]); the DSL takes typed options ([FlowOption], [StepOption]).
Zero values mean documented defaults, and bad values are refused with an error naming the field and the value.
Loggers default to [log/slog.Default].

# Observability and tests

[Hooks] observes polls, claims, handler runs and outcomes without being able to stall the worker; packages
pgflowprom (Prometheus) and pgflowotel (OpenTelemetry) are ready-made adapters in modules of their own. Package
pgflowtest runs one handler without a database, or a whole flow synchronously in a test database.

# The database

Install the schema with package schema's Migrator or `pgflow migrate up`; the client and the worker check the
schema version once and ask for `pgflow migrate up` when it is older than they need. The SQL API keeps pgflow's
(TypeScript, Supabase) function names and signatures, so its tools and knowledge carry over; docs/sql-api.md and
docs/pgflow-differences.md describe it.

[pgflow.ensure_flow_compiled]: https://github.com/pgflow-go/pgflow/blob/main/docs/sql-api.md#pgflowensure_flow_compiled
*/
package pgflow
