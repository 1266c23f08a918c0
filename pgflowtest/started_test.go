package pgflowtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/pgflow-go/pgflow/pgflowtest"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine, as t.Fatalf does, so
// tests can check what a Require function reports. Only Helper and Fatalf are used by the kit.
type fatalRecorder struct {
	testing.TB
	failures []string
}

func (r *fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
	runtime.Goexit()
}

// failures runs f with a fatalRecorder on a goroutine of its own and returns what it reported.
func failures(f func(t testing.TB)) []string {
	r := &fatalRecorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r.failures
}

type signup struct {
	Email string `json:"email"`
	Plan  string `json:"plan"`
	Seats int    `json:"seats"`
}

func newSignupFlow() *pgflow.Flow[signup] {
	f := pgflow.NewFlow[signup]("signup")
	pgflow.Step(f, "welcome", func(ctx context.Context, t *pgflow.Task[signup]) (string, error) {
		in, err := t.FlowInput(ctx)
		return "welcome " + in.Email, err
	})
	return f
}

// register is the application code under test: it starts a run of the signup flow.
func register(ctx context.Context, c *pgflow.Client, f *pgflow.Flow[signup], email string) error {
	_, err := pgflow.StartRun(ctx, c, f, signup{Email: email, Plan: "free", Seats: 1}, nil)
	return err
}

func TestRequireRunStartedFindsTheRunTheCodeStarted(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	f := newSignupFlow()
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, f, nil))

	pgflowtest.RequireNoRunStarted(ctx, t, db.Pool, "signup")
	require.NoError(t, register(ctx, client, f, "ada@example.com"))
	require.NoError(t, register(ctx, client, f, "bob@example.com"))

	run := pgflowtest.RequireRunStarted(ctx, t, db.Pool, f, signup{Email: "bob@example.com", Plan: "free", Seats: 1})
	require.Equal(t, "signup", run.FlowSlug)
	require.JSONEq(t, `{"email":"bob@example.com","plan":"free","seats":1}`, string(run.Input))

	// The run found is the one to drive.
	run, err = pgflowtest.DriveRun(ctx, db.Pool, f, run.ID, nil)
	require.NoError(t, err)
	require.JSONEq(t, `{"welcome":"welcome bob@example.com"}`, string(run.Output))

	// No run with that input: the failure lists the runs that were started.
	got := failures(func(tb testing.TB) {
		pgflowtest.RequireRunStarted(ctx, tb, db.Pool, f, signup{Email: "bob@example.com", Plan: "pro", Seats: 1})
	})
	require.Len(t, got, 1)
	require.Contains(t, got[0], `pgflowtest: no run of flow "signup" was started with input {"email":"bob@example.com","plan":"pro","seats":1}; 2 runs of it were started:`)
	require.Contains(t, got[0], `(completed), input {"plan":"free","email":"bob@example.com","seats":1}`)
	require.Contains(t, got[0], `(started), input {"plan":"free","email":"ada@example.com","seats":1}`)

	// A double start is caught.
	require.NoError(t, register(ctx, client, f, "ada@example.com"))
	got = failures(func(tb testing.TB) {
		pgflowtest.RequireRunStarted(ctx, tb, db.Pool, f, signup{Email: "ada@example.com", Plan: "free", Seats: 1})
	})
	require.Len(t, got, 1)
	require.Contains(t, got[0], `pgflowtest: 2 runs of flow "signup" were started with input {"email":"ada@example.com","plan":"free","seats":1}, want exactly one; 3 runs of it were started:`)

	got = failures(func(tb testing.TB) { pgflowtest.RequireNoRunStarted(ctx, tb, db.Pool, "signup") })
	require.Len(t, got, 1)
	require.Contains(t, got[0], `pgflowtest: want no run of flow "signup", but 3 runs of it were started:`)

	got = failures(func(tb testing.TB) {
		pgflowtest.RequireRunStarted(ctx, tb, pgtest.NewEmpty(t).Pool, f, signup{})
	})
	require.Len(t, got, 1)
	require.Contains(t, got[0], `pgflowtest: RequireRunStarted: pgflowtest: StartedRuns of flow "signup": read the runs`)
}

func TestStartedRunsListsTheRunsOfOneFlowOldestFirst(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	f := newSignupFlow()
	other := newSumFlow("sums_elsewhere")
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, f, nil))
	require.NoError(t, client.EnsureFlow(ctx, other.f, nil))

	var ids []string
	for _, email := range []string{"a@x", "b@x", "c@x"} {
		r, err := pgflow.StartRun(ctx, client, f, signup{Email: email}, nil)
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	_, err = pgflow.StartRun(ctx, client, other.f, "1", nil)
	require.NoError(t, err)

	runs, err := pgflowtest.StartedRuns(ctx, db.Pool, "signup")
	require.NoError(t, err)
	require.Len(t, runs, 3)
	for i, r := range runs {
		require.Equal(t, ids[i], r.ID, "oldest first")
		var in signup
		require.NoError(t, json.Unmarshal(r.Input, &in))
		require.Equal(t, []string{"a@x", "b@x", "c@x"}[i], in.Email)
		require.Equal(t, "welcome", r.Steps[0].StepSlug, "with the step states")
	}

	runs, err = pgflowtest.StartedRuns(ctx, db.Pool, "no_such_flow")
	require.NoError(t, err)
	require.Empty(t, runs)
	_, err = pgflowtest.StartedRuns(ctx, db.Pool, "")
	require.EqualError(t, err, "pgflowtest: StartedRuns: the flow slug is empty")
}

func TestRequireRunStartedInsideTheTestsTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := t.Context()
	f := newSignupFlow()
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	defer client.Close()
	require.NoError(t, client.EnsureFlow(ctx, f, nil))
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	_, err = pgflow.StartRunTx(ctx, client, tx, f, signup{Email: "tx@x", Seats: 2}, nil)
	require.NoError(t, err)
	// Compared as JSON values: jsonb stores the keys in another order than encoding/json writes them.
	run := pgflowtest.RequireRunStarted(ctx, t, tx, f, signup{Seats: 2, Email: "tx@x"})
	pgflowtest.RequireNoRunStarted(ctx, t, db.Pool, "signup") // not committed: invisible outside

	run, err = pgflowtest.DriveRun(ctx, tx, f, run.ID, nil)
	require.NoError(t, err)
	require.Equal(t, pgflow.RunCompleted, run.Status)
}
