package pgflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
	"github.com/stretchr/testify/require"
)

// randomDAG builds a flow of n steps where each step depends on a random subset of earlier ones, with random
// maps, conditions, modes and options. Every step outputs []int so any step can be mapped over.
func randomDAG(slug string, seed uint64, n int) pgflow.AnyFlow {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	f := pgflow.NewFlow[[]int](slug, pgflow.MaxAttempts(1+r.IntN(5)))
	listStep := func(context.Context, *pgflow.Task[[]int]) ([]int, error) { return nil, nil }
	item := func(_ context.Context, _ *pgflow.Task[[]int], x int) (int, error) { return x, nil }
	modes := []pgflow.WhenMode{pgflow.Fail, pgflow.Skip, pgflow.SkipCascade}
	var handles []pgflow.StepHandle[[]int]
	for i := range n {
		stepSlug := fmt.Sprintf("s%02d_%c", i, 'a'+rune(r.IntN(26)))
		var opts []pgflow.StepOption
		if r.IntN(3) == 0 {
			opts = append(opts, pgflow.WhenExhausted(modes[r.IntN(3)]))
		}
		if r.IntN(4) == 0 {
			opts = append(opts, pgflow.Timeout(time.Duration(3+r.IntN(100))*time.Second), pgflow.StartDelay(time.Duration(r.IntN(3))*time.Second))
		}
		switch kind := r.IntN(4); {
		case i == 0 && kind == 0:
			handles = append(handles, pgflow.MapInput(f, stepSlug, item, opts...))
		case i > 0 && kind == 0: // map over one earlier step
			over := handles[r.IntN(len(handles))]
			if r.IntN(2) == 0 {
				opts = append(opts, pgflow.If(map[string]any{over.Slug(): []int{r.IntN(3)}}), pgflow.WhenUnmet(modes[r.IntN(3)]))
			}
			handles = append(handles, pgflow.Map(f, stepSlug, over, item, opts...))
		default: // single step depending on a random subset of earlier steps
			var deps []pgflow.AnyStep
			for _, h := range handles {
				if r.IntN(3) == 0 {
					deps = append(deps, h)
				}
			}
			if len(deps) > 0 {
				opts = append(opts, pgflow.DependsOn(deps...))
				if r.IntN(2) == 0 {
					d := deps[r.IntN(len(deps))].Slug()
					opts = append(opts, pgflow.IfNot(map[string]any{d: map[string]any{}}), pgflow.WhenUnmet(modes[r.IntN(3)]))
				}
			} else if r.IntN(3) == 0 {
				opts = append(opts, pgflow.If(map[string]any{"n": r.IntN(10), "s": "x'y"}))
			}
			handles = append(handles, pgflow.Step(f, stepSlug, listStep, opts...))
		}
	}
	return f
}

// withoutOptions removes the "options" keys from a shape (top level and per step).
func withoutOptions(t *testing.T, shape json.RawMessage) string {
	t.Helper()
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(shape))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&doc))
	delete(doc, "options")
	for _, s := range doc["steps"].([]any) {
		delete(s.(map[string]any), "options")
	}
	out, err := json.Marshal(doc)
	require.NoError(t, err)
	return string(out)
}

// shapeOptions is the options part of a shape, decoded.
type shapeOptions struct {
	MaxAttempts *int `json:"maxAttempts"`
	BaseDelay   *int `json:"baseDelay"`
	Timeout     *int `json:"timeout"`
	StartDelay  *int `json:"startDelay"`
}

func TestShapeMatchesDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	cases := shapeCases()
	for seed := range uint64(6) {
		slug := "rand_dag_" + strconv.FormatUint(seed, 10)
		cases = append(cases, shapeCase{name: slug, build: func() pgflow.AnyFlow { return randomDAG(slug, seed, 8+int(seed)*4) }})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.build()
			require.NoError(t, f.Err())
			stmts, err := f.CompileSQL()
			require.NoError(t, err)
			shape, err := f.Shape()
			require.NoError(t, err)

			// Run the compiled statements in one transaction, twice (they are idempotent).
			for range 2 {
				require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
					for _, stmt := range stmts {
						if _, err := tx.Exec(ctx, stmt); err != nil {
							return fmt.Errorf("%s: %w", stmt, err)
						}
					}
					return nil
				}))
			}

			// The database's shape equals Shape() without options.
			local := withoutOptions(t, shape)
			var equal bool
			var dbText, localText string
			require.NoError(t, db.Pool.QueryRow(ctx,
				`select pgflow._get_flow_shape($1) = $2::jsonb, pgflow._get_flow_shape($1)::text, $2::jsonb::text`,
				f.Slug(), local).Scan(&equal, &dbText, &localText))
			require.True(t, equal, "database shape:\n%s\nShape() without options:\n%s", dbText, localText)

			// The worker's view: the full Shape() (options included) matches, and ensure_flow_compiled verifies it.
			var diffs []string
			require.NoError(t, db.Pool.QueryRow(ctx, `select pgflow._compare_flow_shapes($1::jsonb, pgflow._get_flow_shape($2))`,
				string(shape), f.Slug()).Scan(&diffs))
			require.Empty(t, diffs)
			var status string
			require.NoError(t, db.Pool.QueryRow(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)->>'status'`,
				f.Slug(), string(shape)).Scan(&status))
			require.Equal(t, "verified", status)

			// The options CompileSQL wrote are those Shape() carries (database defaults where absent).
			var doc struct {
				Steps []struct {
					Slug    string        `json:"slug"`
					Options *shapeOptions `json:"options"`
				} `json:"steps"`
				Options *shapeOptions `json:"options"`
			}
			require.NoError(t, json.Unmarshal(shape, &doc))
			fo := doc.Options
			if fo == nil {
				fo = &shapeOptions{}
			}
			var maxAttempts, baseDelay, timeout int
			require.NoError(t, db.Pool.QueryRow(ctx,
				`select opt_max_attempts, opt_base_delay, opt_timeout from pgflow.flows where flow_slug = $1`, f.Slug()).
				Scan(&maxAttempts, &baseDelay, &timeout))
			require.Equal(t, orDefault(fo.MaxAttempts, 3), maxAttempts)
			require.Equal(t, orDefault(fo.BaseDelay, 5), baseDelay)
			require.Equal(t, orDefault(fo.Timeout, 60), timeout)

			rows, err := db.Pool.Query(ctx, `select step_slug, opt_max_attempts, opt_base_delay, opt_timeout, opt_start_delay
				from pgflow.steps where flow_slug = $1 order by step_index`, f.Slug())
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (shapeStepRow, error) {
				var r shapeStepRow
				err := row.Scan(&r.Slug, &r.MaxAttempts, &r.BaseDelay, &r.Timeout, &r.StartDelay)
				return r, err
			})
			require.NoError(t, err)
			want := make([]shapeStepRow, len(doc.Steps))
			for i, s := range doc.Steps {
				want[i].Slug = s.Slug
				if s.Options != nil {
					want[i].MaxAttempts, want[i].BaseDelay, want[i].Timeout, want[i].StartDelay =
						s.Options.MaxAttempts, s.Options.BaseDelay, s.Options.Timeout, s.Options.StartDelay
				}
			}
			require.Equal(t, want, got)

			// The shape alone (as a worker sends it) creates an identical definition under another slug.
			copySlug := f.Slug() + "_copy"
			require.NoError(t, db.Pool.QueryRow(ctx, `select pgflow.ensure_flow_compiled($1, $2::jsonb)->>'status'`,
				copySlug, string(shape)).Scan(&status))
			require.Equal(t, "compiled", status)
			var sameDefinition bool
			require.NoError(t, db.Pool.QueryRow(ctx, `
				with d as (
				  select s.flow_slug,
				         jsonb_agg(to_jsonb(s) - 'flow_slug' - 'created_at' - 'queue_name' order by s.step_index) as steps
				  from pgflow.steps as s where s.flow_slug in ($1, $2) group by s.flow_slug
				), fl as (
				  select flow_slug, to_jsonb(f) - 'flow_slug' - 'created_at' as opts
				  from pgflow.flows as f where f.flow_slug in ($1, $2)
				)
				select (select opts from fl where flow_slug = $1) = (select opts from fl where flow_slug = $2)
				   and (select steps from d where flow_slug = $1) is not distinct from (select steps from d where flow_slug = $2)
				   and pgflow._get_flow_shape($1) = pgflow._get_flow_shape($2)`,
				f.Slug(), copySlug).Scan(&sameDefinition))
			require.True(t, sameDefinition)
			// …except that each flow routes its steps to its own queue.
			var foreignRoutes int
			require.NoError(t, db.Pool.QueryRow(ctx, `select count(*) from pgflow.steps
				where flow_slug in ($1, $2) and queue_name <> lower(flow_slug)`, f.Slug(), copySlug).Scan(&foreignRoutes))
			require.Zero(t, foreignRoutes)
		})
	}
}

type shapeStepRow struct {
	Slug                                        string
	MaxAttempts, BaseDelay, Timeout, StartDelay *int
}

func orDefault(v *int, def int) int {
	if v == nil {
		return def
	}
	return *v
}
