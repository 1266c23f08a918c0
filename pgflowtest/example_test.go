package pgflowtest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/pgflowtest"
)

// Order is the run input of the example flow.
type Order struct {
	ID     int    `json:"id"`
	Amount int    `json:"amount"`
	Email  string `json:"email"`
}

// Receipt is the output of its charge step.
type Receipt struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// Tests run a step's handler without a database: the test gives the flow input and the dependencies' outputs.
func ExampleRunStep() {
	ctx := context.Background()
	f := pgflow.NewFlow[Order]("orders")
	charge := pgflow.Step(f, "charge", func(ctx context.Context, t *pgflow.Task[Order]) (Receipt, error) {
		o, err := t.FlowInput(ctx)
		if err != nil {
			return Receipt{}, err
		}
		if o.Amount <= 0 {
			return Receipt{}, pgflow.Permanent(fmt.Errorf("order %d: invalid amount %d", o.ID, o.Amount))
		}
		return Receipt{ID: fmt.Sprintf("r-%d", o.ID), Amount: o.Amount}, nil
	})
	email := pgflow.Step(f, "email", func(ctx context.Context, t *pgflow.Task[Order]) (string, error) {
		r, err := charge.Output(t)
		if err != nil {
			return "", err
		}
		o, err := t.FlowInput(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("to %s: receipt %s for %d", o.Email, r.ID, r.Amount), nil
	}, pgflow.DependsOn(charge))

	receipt, err := pgflowtest.RunStep(ctx, f, charge, &pgflowtest.RunStepOpts{FlowInput: Order{ID: 7, Amount: 120}})
	fmt.Println(receipt, err)

	_, err = pgflowtest.RunStep(ctx, f, charge, &pgflowtest.RunStepOpts{FlowInput: Order{ID: 8}})
	fmt.Println(err, errors.Is(err, pgflow.ErrPermanent))

	msg, err := pgflowtest.RunStep(ctx, f, email, &pgflowtest.RunStepOpts{
		FlowInput: Order{ID: 7, Email: "ada@example.com"},
		Deps:      map[string]any{charge.Slug(): Receipt{ID: "r-7", Amount: 120}},
	})
	fmt.Println(msg, err)

	_, err = pgflowtest.RunStep(ctx, f, email, &pgflowtest.RunStepOpts{FlowInput: Order{ID: 7}}) // charge left out: skipped
	fmt.Println(errors.Is(err, pgflow.ErrDependencySkipped), strings.Contains(err.Error(), `"charge"`))

	// Output:
	// {r-7 120} <nil>
	// order 8: invalid amount 0 true
	// to ada@example.com: receipt r-7 for 120 <nil>
	// true true
}
