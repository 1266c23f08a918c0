package pgflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
)

type signupInput struct {
	Email string `json:"email"`
}

type account struct {
	ID     int  `json:"id"`
	Active bool `json:"active"`
}

// signupFlow creates an account and then sends a welcome mail; both outputs are part of the run output.
func signupFlow() (*pgflow.Flow[signupInput], pgflow.StepHandle[account], pgflow.StepHandle[bool]) {
	f := pgflow.NewFlow[signupInput]("signup")
	acct := pgflow.Step(f, "account", func(ctx context.Context, t *pgflow.Task[signupInput]) (account, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return account{}, err
		}
		return account{ID: len(in.Email), Active: true}, nil
	})
	mailed := pgflow.Step(f, "welcome", func(ctx context.Context, t *pgflow.Task[signupInput]) (bool, error) {
		a, err := acct.Output(t)
		return a.Active, err // false is stored as false, not as null
	}, pgflow.DependsOn(acct))
	return f, acct, mailed
}

// Start a run with a typed input, wait for it to finish, and read typed outputs. A worker for the flow runs
// elsewhere (see ExampleWorker_Run); Client.EnsureFlow compiles the flow first, so the start works even before.
func ExampleStartRun() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	flow, acct, welcome := signupFlow()
	if err := client.EnsureFlow(ctx, flow, nil); err != nil {
		log.Fatal(err) // e.g. a *pgflow.ShapeMismatchError: the database holds another version of the flow
	}
	run, err := pgflow.StartRun(ctx, client, flow, signupInput{Email: "ada@example.com"}, nil)
	if err != nil {
		log.Fatal(err)
	}

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	run, err = client.WaitRun(waitCtx, run.ID)
	if err != nil {
		log.Fatal(err) // the context ended first, or the run does not exist
	}
	if err := run.Err(); err != nil {
		log.Fatal(err) // the run failed: names each failed step and its error message
	}

	a, err := pgflow.StepOutput(run, acct) // typed: account
	if err != nil {
		log.Fatal(err)
	}
	sent, err := pgflow.StepOutput(run, welcome) // typed: bool
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(a.ID, sent)

	// The run output holds the leaf steps' outputs, keyed by slug.
	out, err := pgflow.RunOutput[struct {
		Welcome bool `json:"welcome"`
	}](run)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out.Welcome)
}

// A caller-chosen run id makes the start idempotent: a retried request starts the run once and gets it back.
func ExampleStartOpts() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	requestID := "3b241101-e2bb-4255-8caf-4136c566a962" // e.g. the idempotency key of an HTTP request
	for range 2 {
		run, err := client.StartRunJSON(ctx, "signup", json.RawMessage(`{"email": "ada@example.com"}`), &pgflow.StartOpts{RunID: requestID})

		if errors.Is(err, pgflow.ErrRunIDConflict) {
			log.Fatal("that id belongs to a run of another flow")
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(run.ID, run.Status)
	}
}

// Start a run in the same transaction as the application's own writes: both commit, or neither does.
func ExampleClient_StartRunJSONTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit

	if _, err := tx.Exec(ctx, `insert into signups (email) values ($1)`, "ada@example.com"); err != nil {
		log.Fatal(err)
	}
	run, err := client.StartRunJSONTx(ctx, tx, "signup", json.RawMessage(`{"email": "ada@example.com"}`), nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("started", run.ID)
}

// Follow a run's progress as it happens. The channel closes after the run's last event; GetRun shows where the
// run stood when the subscription began.
func ExampleClient_Subscribe() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	run, err := client.StartRunJSON(ctx, "signup", json.RawMessage(`{"email": "ada@example.com"}`), nil)
	if err != nil {
		log.Fatal(err)
	}
	events, err := client.Subscribe(ctx, run.ID)
	if err != nil {
		log.Fatal(err)
	}
	if run, err = client.GetRun(ctx, run.ID); err != nil { // the state as of the subscription
		log.Fatal(err)
	}
	for _, s := range run.Steps {
		fmt.Printf("%-10s %s\n", s.StepSlug, s.Status)
	}
	for ev := range events {
		if ev.IsRunEvent() {
			fmt.Println("run", ev.Status)
			continue
		}
		fmt.Printf("%-10s %s\n", ev.StepSlug, ev.Status)
	}
	final, err := client.GetRun(ctx, run.ID) // outputs and error messages are read, not streamed
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.ToUpper(string(final.Status)))
}
