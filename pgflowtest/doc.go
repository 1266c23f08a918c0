// Package pgflowtest helps applications test their pgflow flows: a step's handler alone, without a database; a
// whole flow, synchronously, in a test database; and the runs the code under test started.
//
// # Handlers, without a database
//
// RunStep runs one step's real handler through the runner a worker uses, with the flow input and dependency
// outputs the test gives (RunStepOpts), and returns the step's output decoded into its type:
//
//	out, err := pgflowtest.RunStep(ctx, flow, email, &pgflowtest.RunStepOpts{
//		FlowInput: Order{ID: 7},
//		Deps:      map[string]any{"charge": Receipt{ID: "r-1"}}, // what charge.Output(t) returns
//	})
//
// Inputs go through JSON as in a run, a panic comes back as a *pgflow.PanicError, pgflow.Permanent errors stay
// permanent (errors.Is(err, pgflow.ErrPermanent)), and a dependency left out of Deps is seen as skipped. A map
// step runs one task per element (RunStep) or one task with a given element (RunMapTask). RunStepJSON takes a
// step slug when the step handles are out of the test's reach.
//
// # Flows, in a test database
//
// RunFlow compiles a flow, starts a run and runs its tasks in the calling goroutine with the worker's own
// executor and completer (the real SQL: pgflow.start_tasks, complete_tasks, fail_task) until the run completes or
// fails, then returns it: check it with pgflow.StepOutput and pgflow.RunOutput. Delays (StartDelay, retry
// backoff) are skipped, so a test never waits for them; nothing keeps running after it returns. DriveRun does the
// same for a run that already exists. Both accept a *pgxpool.Pool, a *pgx.Conn or the test's pgx.Tx.
//
//	run, err := pgflowtest.RunFlow(ctx, pool, flow, Order{ID: 7}, nil)
//	require.NoError(t, err) // a failed run returns its error: the failed steps and their messages
//	receipt, err := pgflow.StepOutput(run, charge)
//
// The database needs the pgflow schema. Point the tests at a database of their own (runs and flows are rows
// there) and install the schema once, e.g. in TestMain, with the migrator (idempotent):
//
//	conn, err := pgx.Connect(ctx, os.Getenv("TEST_DATABASE_URL"))
//	...
//	_, err = schema.NewMigrator(conn, nil).Up(ctx, "") // package github.com/pgflow-go/pgflow/schema
//
// or with `pgflow migrate up --database-url ...`. Run each test in a transaction of its own (begin, RunFlow on
// the pgx.Tx, roll back) and it leaves nothing behind; transactions that run the same flow wait for each other,
// as RunFlow compiles the flow under a transaction-level lock. On a pool, parallel RunFlow calls are safe: each
// claims its own run's tasks only. Do not run a pgflow.Worker for the same flows in that database meanwhile.
//
// # Runs started by the code under test
//
// RequireRunStarted asserts that exactly one run of a flow was started with a given input and returns it;
// RequireNoRunStarted asserts that none was; StartedRuns lists them all.
package pgflowtest
