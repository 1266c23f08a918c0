package pgflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgflow-go/pgflow"
)

type OrderInput struct {
	OrderID int    `json:"orderId"`
	Email   string `json:"email"`
}

type Order struct {
	Lines []Line `json:"lines"`
	Paid  bool   `json:"paid"`
}

type Line struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// A flow with a root step, a map step over its lines, a step that joins both, and a conditional step.
func ExampleNewFlow() {
	f := pgflow.NewFlow[OrderInput]("process_order",
		pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second), pgflow.Timeout(30*time.Second))

	order := pgflow.Step(f, "order", func(ctx context.Context, t *pgflow.Task[OrderInput]) (Order, error) {
		in, err := t.FlowInput(ctx) // typed flow input
		if err != nil {
			return Order{}, err
		}
		t.Logger.Info("loading order", "order_id", in.OrderID)
		return Order{Lines: []Line{{"A", 2}}, Paid: true}, nil
	})

	lines := pgflow.Step(f, "lines", func(ctx context.Context, t *pgflow.Task[OrderInput]) ([]Line, error) {
		o, err := order.Output(t) // typed dependency output
		return o.Lines, err
	}, pgflow.DependsOn(order))

	priced := pgflow.Map(f, "price", lines, func(ctx context.Context, t *pgflow.Task[OrderInput], l Line) (int, error) {
		return l.Qty * 100, nil // one task per line
	}, pgflow.MaxAttempts(5))

	pgflow.Step(f, "receipt", func(ctx context.Context, t *pgflow.Task[OrderInput]) (string, error) {
		cents, err := priced.Output(t)
		if err != nil {
			return "", err
		}
		return fmt.Sprint(cents), nil
	}, pgflow.DependsOn(priced, order),
		pgflow.If(map[string]any{"order": map[string]any{"paid": true}}), pgflow.WhenUnmet(pgflow.Skip))

	if err := f.Err(); err != nil {
		fmt.Println(err)
		return
	}
	shape, err := f.Shape() // what the worker sends to pgflow.ensure_flow_compiled
	if err != nil {
		fmt.Println(err)
		return
	}
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, shape, "", "  ")
	fmt.Println(pretty.String())
	// Output:
	// {
	//   "steps": [
	//     {
	//       "slug": "order",
	//       "stepType": "single",
	//       "dependencies": [],
	//       "whenUnmet": "skip",
	//       "whenExhausted": "fail",
	//       "requiredInputPattern": {
	//         "defined": false
	//       },
	//       "forbiddenInputPattern": {
	//         "defined": false
	//       }
	//     },
	//     {
	//       "slug": "lines",
	//       "stepType": "single",
	//       "dependencies": [
	//         "order"
	//       ],
	//       "whenUnmet": "skip",
	//       "whenExhausted": "fail",
	//       "requiredInputPattern": {
	//         "defined": false
	//       },
	//       "forbiddenInputPattern": {
	//         "defined": false
	//       }
	//     },
	//     {
	//       "slug": "price",
	//       "stepType": "map",
	//       "dependencies": [
	//         "lines"
	//       ],
	//       "whenUnmet": "skip",
	//       "whenExhausted": "fail",
	//       "requiredInputPattern": {
	//         "defined": false
	//       },
	//       "forbiddenInputPattern": {
	//         "defined": false
	//       },
	//       "options": {
	//         "maxAttempts": 5
	//       }
	//     },
	//     {
	//       "slug": "receipt",
	//       "stepType": "single",
	//       "dependencies": [
	//         "order",
	//         "price"
	//       ],
	//       "whenUnmet": "skip",
	//       "whenExhausted": "fail",
	//       "requiredInputPattern": {
	//         "defined": true,
	//         "value": {
	//           "order": {
	//             "paid": true
	//           }
	//         }
	//       },
	//       "forbiddenInputPattern": {
	//         "defined": false
	//       }
	//     }
	//   ],
	//   "options": {
	//     "maxAttempts": 3,
	//     "baseDelay": 1,
	//     "timeout": 30
	//   }
	// }
}

// A root map over the flow input (the input type is a slice) and a step summing its results.
func ExampleMapInput() {
	f := pgflow.NewFlow[[]int]("double_all")
	doubled := pgflow.MapInput(f, "double", func(ctx context.Context, t *pgflow.Task[[]int], n int) (int, error) {
		return 2 * n, nil
	})
	pgflow.Step(f, "sum", func(ctx context.Context, t *pgflow.Task[[]int]) (int, error) {
		ns, err := doubled.Output(t)
		total := 0
		for _, n := range ns {
			total += n
		}
		return total, err
	}, pgflow.DependsOn(doubled))

	stmts, err := f.CompileSQL()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(strings.Join(stmts, "\n"))
	// Output:
	// select pgflow.create_flow(flow_slug => 'double_all');
	// select pgflow.add_step(flow_slug => 'double_all', step_slug => 'double', step_type => 'map');
	// select pgflow.add_step(flow_slug => 'double_all', step_slug => 'sum', deps_slugs => array['double']);
}

// Definition mistakes are collected, not panicked; each names the flow, the step and the bad value. (A step-only
// option such as StartDelay given to NewFlow does not even compile.)
func ExampleFlow_Err() {
	f := pgflow.NewFlow[OrderInput]("orders", pgflow.MaxAttempts(0))
	a := pgflow.Step(f, "fetch", func(ctx context.Context, t *pgflow.Task[OrderInput]) (int, error) { return 1, nil },
		pgflow.Timeout(time.Second))
	pgflow.Step(f, "fetch-all", func(ctx context.Context, t *pgflow.Task[OrderInput]) (int, error) { return 1, nil },
		pgflow.DependsOn(a))

	err := f.Err()
	fmt.Println(err)
	fmt.Println(errors.Is(err, pgflow.ErrOptionOutOfRange))
	_, err = f.Shape()
	fmt.Println(err != nil)
	// Output:
	// pgflow: flow "orders": option out of range: MaxAttempts(0): must be between 1 and 2147483647
	// pgflow: flow "orders", step "fetch": option out of range: Timeout(1s): must be between 3s and 2147483647s
	// pgflow: flow "orders", step "fetch-all": invalid slug: "fetch-all" may contain only ASCII letters, digits and '_'
	// true
	// true
}
