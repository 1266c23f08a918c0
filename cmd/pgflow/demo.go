package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/backoff"
	"github.com/pgflow-go/pgflow/internal/pgcluster"
	"github.com/pgflow-go/pgflow/schema"
)

// demoFlowSlug names the demo's flow (and its queue). It is prefixed so it never clashes with a user's flow in a
// database given with --database-url.
const demoFlowSlug = "pgflow_demo"

// demoOrder is the input of the demo flow.
type demoOrder struct {
	Customer string   `json:"customer"`
	Items    []string `json:"items"`
}

type demoCustomer struct {
	Name string `json:"name"`
	Tier string `json:"tier"`
}

type demoLine struct {
	Item  string `json:"item"`
	Cents int    `json:"cents"`
}

type demoInvoice struct {
	Customer string     `json:"customer"`
	Lines    []demoLine `json:"lines"`
	Subtotal int        `json:"subtotal_cents"`
	Discount int        `json:"discount_cents"`
	Total    int        `json:"total_cents"`
	Gift     string     `json:"gift,omitempty"`
}

// demoInput is the run input the demo starts.
var demoInput = demoOrder{Customer: "ada", Items: []string{"apples", "bread", "cheese", "dates"}}

// demoFlow is the demo's DAG. Two root steps run in parallel; "price" maps over the items (one task per item,
// in parallel); "discount" and "gift" (which runs only for gold customers) follow "customer"; "invoice" joins
// everything:
//
//	items ──▶ price (map) ───────────┐
//	customer ──▶ discount ───────────┼──▶ invoice
//	         └──▶ gift (if gold) ────┘
//
// Every handler sleeps about pause, so the progress is visible.
func demoFlow(pause time.Duration) *pgflow.Flow[demoOrder] {
	f := pgflow.NewFlow[demoOrder](demoFlowSlug, pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second),
		pgflow.Timeout(10*time.Second))

	items := pgflow.Step(f, "items", func(ctx context.Context, t *pgflow.Task[demoOrder]) ([]string, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return nil, err
		}
		return in.Items, backoff.Sleep(ctx, pause)
	})

	customer := pgflow.Step(f, "customer", func(ctx context.Context, t *pgflow.Task[demoOrder]) (demoCustomer, error) {
		in, err := t.FlowInput(ctx)
		if err != nil {
			return demoCustomer{}, err
		}
		tier := "standard"
		if len(in.Customer) <= 3 {
			tier = "gold" // a short name is a long-standing customer, obviously
		}
		return demoCustomer{Name: strings.ToUpper(in.Customer[:1]) + in.Customer[1:], Tier: tier}, backoff.Sleep(ctx, pause*3/2)
	})

	prices := pgflow.Map(f, "price", items, func(ctx context.Context, t *pgflow.Task[demoOrder], item string) (demoLine, error) {
		cents := 0
		for _, r := range item {
			cents += int(r)
		}
		// Tasks of one map step take different times; the step completes when the last one has.
		return demoLine{Item: item, Cents: cents}, backoff.Sleep(ctx, pause/2+time.Duration(t.TaskIndex)*pause/3)
	})

	discount := pgflow.Step(f, "discount", func(ctx context.Context, t *pgflow.Task[demoOrder]) (int, error) {
		c, err := customer.Output(t)
		if err != nil {
			return 0, err
		}
		percent := 0
		if c.Tier == "gold" {
			percent = 10
		}
		return percent, backoff.Sleep(ctx, pause)
	}, pgflow.DependsOn(customer))

	gift := pgflow.Step(f, "gift", func(ctx context.Context, t *pgflow.Task[demoOrder]) (string, error) {
		return "a jar of honey", backoff.Sleep(ctx, pause/2)
	}, pgflow.DependsOn(customer),
		pgflow.If(map[string]any{"customer": map[string]any{"tier": "gold"}}), pgflow.WhenUnmet(pgflow.Skip))

	pgflow.Step(f, "invoice", func(ctx context.Context, t *pgflow.Task[demoOrder]) (demoInvoice, error) {
		lines, err := prices.Output(t)
		if err != nil {
			return demoInvoice{}, err
		}
		percent, err := discount.Output(t)
		if err != nil {
			return demoInvoice{}, err
		}
		c, err := customer.Output(t)
		if err != nil {
			return demoInvoice{}, err
		}
		inv := demoInvoice{Customer: c.Name, Lines: lines}
		if g, err := gift.Output(t); err == nil {
			inv.Gift = g
		} else if !errors.Is(err, pgflow.ErrDependencySkipped) {
			return demoInvoice{}, err
		}
		for _, l := range lines {
			inv.Subtotal += l.Cents
		}
		inv.Discount = inv.Subtotal * percent / 100
		inv.Total = inv.Subtotal - inv.Discount
		return inv, backoff.Sleep(ctx, pause/2)
	}, pgflow.DependsOn(prices, discount, customer, gift))

	return f
}

// errNoServerBinaries is the demo's message when it cannot start a throwaway server.
const errNoServerBinaries = "the demo starts a throwaway PostgreSQL server, but no PostgreSQL server binaries " +
	"(initdb, postgres) were found: install the Debian package 'postgresql' (sudo apt-get install postgresql) " +
	"or run the demo against an existing database with --database-url postgres://user@host/db"

func newDemoCmd(g *globalOptions) *cobra.Command {
	var plain bool
	var pause time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run an example flow end to end on a throwaway database",
		Long: `Run an example flow end to end and show it live:

  1. start a throwaway PostgreSQL server from the machine's binaries (deleted when the demo ends), or use the
     database given with --database-url (the demo ignores $DATABASE_URL, so it only touches a database you name);
  2. install the pgflow schema (and PGMQ) with the migrator, like 'pgflow migrate up';
  3. define the flow pgflow_demo: two parallel root steps, a map step with one task per item, a conditional
     step, and a final step that joins them;
  4. start a real worker for it in this process, start a run, and show each step's progress until the run
     completes, then print its output;
  5. stop the worker gracefully and remove the throwaway server.

The demo's connections set pgflow.environment=local, so the worker may recompile pgflow_demo if its definition
changed (in a database given with --database-url this deletes earlier pgflow_demo runs; nothing else is
touched). The throwaway server needs the PostgreSQL server binaries (Debian package 'postgresql').`,
		Example: `  pgflow demo
  go run ./cmd/pgflow demo
  pgflow demo --database-url postgres://postgres@localhost:5432/scratch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pause < 0 {
				return fmt.Errorf("--pause %s: must be >= 0", pause)
			}
			url := ""
			if f := cmd.Flag("database-url"); f != nil && f.Changed {
				url = g.databaseURL
				if url == "" {
					return errors.New("--database-url is empty")
				}
			}
			out := cmd.OutOrStdout()
			return runDemo(cmd.Context(), out, cmd.ErrOrStderr(), demoConfig{
				url: url, ansi: !plain && isTerminal(out), pause: pause, findServer: pgcluster.BinDir,
			})
		},
	}
	cmd.Flags().BoolVar(&plain, "plain", false, "append one line per change instead of redrawing, also on a terminal")
	cmd.Flags().DurationVar(&pause, "pause", 400*time.Millisecond, "how long each demo handler works (sleeps)")
	return cmd
}

// demoConfig is what the demo command hands to runDemo.
type demoConfig struct {
	url        string                 // "" starts a throwaway cluster
	ansi       bool                   // redraw the progress in place
	pause      time.Duration          // how long each handler sleeps
	findServer func() (string, error) // locates the server binaries (pgcluster.BinDir)
}

// runDemo runs the demo against cfg.url, or against a throwaway cluster when it is "".
func runDemo(ctx context.Context, out, errOut io.Writer, cfg demoConfig) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }
	url, ansi, pause := cfg.url, cfg.ansi, cfg.pause

	if url == "" {
		if _, err := cfg.findServer(); err != nil {
			return errors.New(errNoServerBinaries)
		}
		say("starting a throwaway PostgreSQL server")
		cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
		if err != nil {
			return fmt.Errorf("start a throwaway PostgreSQL server: %w", err)
		}
		defer func() {
			cluster.Stop()
			say("removed the throwaway server")
		}()
		url = cluster.URL("postgres")
		say("server ready at %s", url)
	}

	if err := demoMigrate(ctx, url, say); err != nil {
		return err
	}

	pool, err := openPool(ctx, url, 16, map[string]string{
		"application_name":   "pgflow-demo",
		"pgflow.environment": "local", // the demo's flow may be recompiled freely
	})
	if err != nil {
		return err
	}
	defer pool.Close()

	client, err := pgflow.NewClient(pool, &pgflow.ClientConfig{PollInterval: time.Second})
	if err != nil {
		return err
	}
	defer client.Close()

	flow := demoFlow(pause)
	worker, err := pgflow.NewWorker(client, &pgflow.WorkerConfig{
		Flows:             []pgflow.WorkerFlow{{Flow: flow}},
		MaxConcurrent:     8,
		MaxPollWait:       time.Second,
		PollInterval:      20 * time.Millisecond,
		HeartbeatInterval: time.Second,
		ShutdownTimeout:   10 * time.Second,
		Logger:            slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	say("starting a worker for flow %s (it compiles the flow into the database)", demoFlowSlug)
	if err := worker.Start(ctx); err != nil {
		if ctx.Err() != nil {
			say("interrupted: cleaning up")
			return exitError{code: 130}
		}
		return fmt.Errorf("worker: %w", err)
	}
	// The worker stops gracefully (its handlers get up to ShutdownTimeout); a second signal stops it at once,
	// its interrupted tasks going back to their queue.
	workerStopped := false
	stop := func() error {
		if workerStopped {
			return nil
		}
		workerStopped = true
		err := worker.Stop(stopNowContext(ctx))
		if errors.Is(err, context.Canceled) {
			return nil // stopped at once on a second signal, as asked
		}
		return err
	}
	defer func() { _ = stop() }()
	say("worker %s is running", worker.ID())

	run, err := pgflow.StartRun(ctx, client, flow, demoInput, nil)
	if err != nil {
		return err
	}
	say("started run %s with input %s", run.ID, compactJSON(run.Input))
	view := newProgressView(out, ansi)
	final, err := watchRun(ctx, client, pool, run.ID, view, time.Second)
	if err != nil {
		if ctx.Err() != nil {
			say("interrupted: stopping the worker gracefully (interrupt again to stop it at once) and cleaning up")
			if err := stop(); err != nil {
				fmt.Fprintf(errOut, "worker: %v\n", err)
			}
			return exitError{code: 130}
		}
		return err
	}
	view.finish(final)

	say("stopping the worker")
	if err := stop(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	say("worker stopped")
	if final.Run.Status != "completed" {
		return errors.New(runError(final))
	}
	say("done; see 'pgflow --help' and docs/getting-started.md to write your own flow")
	return nil
}

// demoMigrate installs PGMQ and the pgflow schema.
func demoMigrate(ctx context.Context, url string, say func(string, ...any)) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("bad --database-url: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s:%d/%s: %w", cfg.Host, cfg.Port, cfg.Database, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	report, err := schema.NewMigrator(conn, nil).Up(ctx, "")
	if err != nil {
		return fmt.Errorf("install the pgflow schema: %w", err)
	}
	if len(report.Applied) == 0 {
		say("pgflow schema %s already installed (PGMQ: %s)", report.Current, report.PGMQ)
	} else {
		say("installed the pgflow schema %s (PGMQ: %s)", report.Current, report.PGMQ)
	}
	return nil
}
