package pgflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgflow-go/pgflow"
	"github.com/stretchr/testify/require"
)

func TestCompileSQL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		build func() pgflow.AnyFlow
		want  []string
	}{
		{
			name:  "empty flow without options",
			build: func() pgflow.AnyFlow { return pgflow.NewFlow[int]("empty_flow") },
			want:  []string{`select pgflow.create_flow(flow_slug => 'empty_flow');`},
		},
		{
			name: "options and chain in declaration order",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("test_flow", pgflow.MaxAttempts(5), pgflow.BaseDelay(10*time.Second), pgflow.Timeout(120*time.Second))
				s1 := pgflow.Step(f, "step1", intHandler, pgflow.MaxAttempts(3), pgflow.BaseDelay(5*time.Second), pgflow.Timeout(120*time.Second), pgflow.StartDelay(900*time.Second))
				s0 := pgflow.Step(f, "step0", intHandler)
				pgflow.Step(f, "step2", intHandler, pgflow.DependsOn(s1, s0), pgflow.Timeout(30*time.Second))
				return f
			},
			want: []string{
				`select pgflow.create_flow(flow_slug => 'test_flow', max_attempts => 5, base_delay => 10, timeout => 120);`,
				`select pgflow.add_step(flow_slug => 'test_flow', step_slug => 'step1', max_attempts => 3, base_delay => 5, timeout => 120, start_delay => 900);`,
				`select pgflow.add_step(flow_slug => 'test_flow', step_slug => 'step0');`,
				// dependencies keep declaration order (the shape sorts them; the SQL does not need to)
				`select pgflow.add_step(flow_slug => 'test_flow', step_slug => 'step2', deps_slugs => array['step1', 'step0'], timeout => 30);`,
			},
		},
		{
			name: "maps",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[[]int]("map_flow")
				d := pgflow.MapInput(f, "double", numsItem, pgflow.MaxAttempts(5), pgflow.StartDelay(0))
				pgflow.Map(f, "square", d, numsItem)
				return f
			},
			want: []string{
				`select pgflow.create_flow(flow_slug => 'map_flow');`,
				`select pgflow.add_step(flow_slug => 'map_flow', step_slug => 'double', max_attempts => 5, start_delay => 0, step_type => 'map');`,
				`select pgflow.add_step(flow_slug => 'map_flow', step_slug => 'square', deps_slugs => array['double'], step_type => 'map');`,
			},
		},
		{
			name: "per-step queues",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("routed", pgflow.QueuePerStep(), pgflow.Timeout(10*time.Second))
				pgflow.Step(f, "only", intHandler)
				return f
			},
			want: []string{
				`select pgflow.create_flow(flow_slug => 'routed', timeout => 10, queue_mode => 'step');`,
				`select pgflow.add_step(flow_slug => 'routed', step_slug => 'only');`,
			},
		},
		{
			name: "message retention",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("lean", pgflow.DeleteTaskMessages())
				pgflow.Step(f, "only", intHandler)
				return f
			},
			want: []string{
				`select pgflow.create_flow(flow_slug => 'lean', message_retention => 'delete');`,
				`select pgflow.add_step(flow_slug => 'lean', step_slug => 'only');`,
			},
		},
		{
			name: "conditions, modes and quoting",
			build: func() pgflow.AnyFlow {
				f := pgflow.NewFlow[orderInput]("cond_flow")
				fetch := pgflow.Step(f, "fetch", pageHandler, pgflow.If(map[string]any{"note": "O'Reilly"}), pgflow.WhenUnmet(pgflow.SkipCascade))
				pgflow.Step(f, "esc", intHandler, pgflow.DependsOn(fetch),
					pgflow.IfNot(map[string]any{"fetch": map[string]any{"path": `C:\tmp 'x'`}}),
					pgflow.WhenUnmet(pgflow.Fail), pgflow.WhenExhausted(pgflow.Skip))
				pgflow.Step(f, "exh", intHandler, pgflow.WhenExhausted(pgflow.Fail))
				return f
			},
			want: []string{
				`select pgflow.create_flow(flow_slug => 'cond_flow');`,
				`select pgflow.add_step(flow_slug => 'cond_flow', step_slug => 'fetch', required_input_pattern => '{"note":"O''Reilly"}'::jsonb, when_unmet => 'skip-cascade');`,
				`select pgflow.add_step(flow_slug => 'cond_flow', step_slug => 'esc', deps_slugs => array['fetch'], forbidden_input_pattern => E'{"fetch":{"path":"C:\\\\tmp ''x''"}}'::jsonb, when_unmet => 'fail', when_exhausted => 'skip');`,
				`select pgflow.add_step(flow_slug => 'cond_flow', step_slug => 'exh', when_exhausted => 'fail');`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := tc.build()
			require.NoError(t, f.Err())
			got, err := f.CompileSQL()
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			for _, stmt := range got {
				require.NotContains(t, stmt, "\n")
			}
		})
	}
}

func TestCompileSQLRefusesInvalidFlow(t *testing.T) {
	t.Parallel()
	f := pgflow.NewFlow[orderInput]("ok_flow")
	pgflow.Step(f, "a", func(context.Context, *pgflow.Task[orderInput]) (int, error) { return 1, nil }, pgflow.Timeout(0))
	got, err := f.CompileSQL()
	require.Nil(t, got)
	require.ErrorIs(t, err, pgflow.ErrOptionOutOfRange)
	require.ErrorContains(t, err, `flow "ok_flow", step "a"`)
}
