// Command conditional runs a sign-up flow whose steps run only when a condition holds:
//
//	account ──▶ billing (If plan is "pro") ──▶ trial_reminder (IfNot billing: runs when billing was skipped)
//	   │                │                                 │
//	   └────────────────┴──────────────▶ welcome ◀─────────┘
//	subscribe (root; If the input says newsletter: true)
//
// A condition is a JSON pattern matched by containment (PostgreSQL's @>). A root step's pattern is matched
// against the run input; a dependent step's against {"<dependency>": <its output>, ...} of the dependencies that
// completed, so a skipped dependency is simply absent. WhenUnmet(Skip) skips the step when the condition does not
// hold (the default; Fail would fail the run, SkipCascade would skip its dependents too). Dependents of a skipped
// step still run and see its output as absent (StepHandle.Output returns ErrDependencySkipped).
//
//	export DATABASE_URL=postgres://postgres@localhost:5432/app
//	go run ./cmd/pgflow migrate up
//	go run ./examples/conditional ada@example.com pro
//	go run ./examples/conditional linus@example.com free
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
)

// Input is the run input of the flow.
type Input struct {
	Email      string `json:"email"`
	Plan       string `json:"plan"` // "pro" or "free"
	Newsletter bool   `json:"newsletter"`
}

// Account is what "account" returns.
type Account struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Plan  string `json:"plan"`
}

// Billing is what "billing" returns. It is a JSON object, which the IfNot pattern {"billing": {}} relies on:
// {} is contained in any object, so the pattern matches exactly when billing completed.
type Billing struct {
	Customer     string `json:"customer"`
	MonthlyCents int    `json:"monthly_cents"`
}

// Reminder is what "trial_reminder" returns.
type Reminder struct {
	InDays int `json:"in_days"`
}

// Welcome is what "welcome" returns.
type Welcome struct {
	To   string `json:"to"`
	Text string `json:"text"`
}

// Output is the run output: one field per leaf step that completed. subscribe is absent when it was skipped.
type Output struct {
	Welcome   Welcome `json:"welcome"`
	Subscribe *string `json:"subscribe,omitempty"`
}

// SignupFlow defines the flow.
func SignupFlow() *pgflow.Flow[Input] {
	f := pgflow.NewFlow[Input]("signup", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second))

	account := pgflow.Step(f, "account", func(ctx context.Context, t *pgflow.Task[Input]) (Account, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return Account{}, err
		}
		h := fnv.New32a()
		h.Write([]byte(in.Email))
		return Account{ID: fmt.Sprintf("acct_%08x", h.Sum32()), Email: in.Email, Plan: in.Plan}, nil
	})

	// A root step's condition is matched against the run input.
	pgflow.Step(f, "subscribe", func(ctx context.Context, t *pgflow.Task[Input]) (string, error) {
		in, err := t.FlowInput(ctx)
		return "subscribed " + in.Email, err
	}, pgflow.If(map[string]any{"newsletter": true}), pgflow.WhenUnmet(pgflow.Skip))

	// A dependent step's condition is matched against its dependencies' outputs.
	billing := pgflow.Step(f, "billing", func(ctx context.Context, t *pgflow.Task[Input]) (Billing, error) {
		acct, err := account.Output(t)
		if err != nil {
			return Billing{}, err
		}
		return Billing{Customer: "cus_" + acct.ID[len("acct_"):], MonthlyCents: 1900}, nil
	}, pgflow.DependsOn(account),
		pgflow.If(map[string]any{"account": map[string]any{"plan": "pro"}}), pgflow.WhenUnmet(pgflow.Skip))

	// Runs only when billing was skipped: its condition input then has no "billing" key.
	trial := pgflow.Step(f, "trial_reminder", func(ctx context.Context, t *pgflow.Task[Input]) (Reminder, error) {
		return Reminder{InDays: 14}, nil
	}, pgflow.DependsOn(billing), pgflow.IfNot(map[string]any{"billing": map[string]any{}}))

	pgflow.Step(f, "welcome", func(ctx context.Context, t *pgflow.Task[Input]) (Welcome, error) {
		acct, err := account.Output(t)
		if err != nil {
			return Welcome{}, err
		}
		w := Welcome{To: acct.Email}
		// Exactly one of billing and trial_reminder ran; the other one's output is absent.
		if b, err := billing.Output(t); err == nil {
			w.Text = fmt.Sprintf("Welcome to Pro! You are billed %d.%02d a month.", b.MonthlyCents/100, b.MonthlyCents%100)
		} else if !errors.Is(err, pgflow.ErrDependencySkipped) {
			return Welcome{}, err
		}
		if r, err := trial.Output(t); err == nil {
			w.Text = fmt.Sprintf("Welcome! We will remind you of Pro in %d days.", r.InDays)
		} else if !errors.Is(err, pgflow.ErrDependencySkipped) {
			return Welcome{}, err
		}
		return w, nil
	}, pgflow.DependsOn(account, billing, trial))

	return f
}

func main() {
	ctx, stopNow := signalContexts()
	in := Input{Email: "ada@example.com", Plan: "pro", Newsletter: true}
	if len(os.Args) > 2 {
		in = Input{Email: os.Args[1], Plan: os.Args[2]}
	}
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	run, err := Run(ctx, stopNow, pool, in)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range run.Steps {
		fmt.Printf("%-15s %-9s %s\n", s.StepSlug, s.Status, s.SkipReason)
	}
	out, err := pgflow.RunOutput[Output](run)
	if err != nil {
		log.Fatal(err)
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// Run starts a worker for SignupFlow, starts one run with input, waits until it completed or failed, stops the
// worker and returns the run.
func Run(ctx, stopNow context.Context, pool *pgxpool.Pool, input Input) (*pgflow.Run, error) {
	flow := SignupFlow()
	client, err := pgflow.NewClient(pool, nil)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	worker, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{Flows: []pgflow.WorkerFlow{{Flow: flow}}})
	if err != nil {
		return nil, err
	}
	if err := worker.Start(ctx); err != nil { // returns once the worker runs; it has compiled the flow
		return nil, err
	}
	defer func() {
		// Graceful: in-flight handlers finish and report first. stopNow ending (a second signal) stops at once:
		// handlers are cancelled and their tasks go back to the queue without spending an attempt.
		if err := worker.Stop(stopNow); err != nil {
			log.Printf("worker: %v", err)
		}
	}()

	run, err := pgflow.StartRun(ctx, client, flow, input, nil)
	if err != nil {
		return nil, err
	}
	return client.WaitRun(ctx, run.ID)
}

// signalContexts returns ctx, which the first SIGINT or SIGTERM ends, and stopNow, which the second one ends.
// The first signal begins a graceful shutdown: Run stops waiting and stops the worker, whose running handlers
// finish and report first. The second cuts it short: handlers are cancelled and their tasks go back to the queue.
func signalContexts() (ctx, stopNow context.Context) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	stopNow, cancelStopNow := context.WithCancel(context.Background())
	go func() {
		<-sigs
		log.Print("graceful shutdown began (running handlers finish first); interrupt again to stop at once")
		cancel()
		<-sigs
		log.Print("stopping at once: interrupted tasks go back to their queue")
		cancelStopNow()
	}()
	return ctx, stopNow
}
