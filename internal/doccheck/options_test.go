package doccheck

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The DSL separates flow options from step options in the type system: a step-only option given to NewFlow does
// not compile (before v0.20.0 it compiled and was reported at run time by Flow.Err). Each case is type-checked
// against the current code; the valid control proves the check itself works.
func TestStepOnlyOptionsDoNotCompileOnAFlow(t *testing.T) {
	imp := newExportImporter(t, ".", []string{"github.com/pgflow-go/pgflow", "time"})
	wrap := func(stmt string) string {
		return "package optcheck\n\nimport (\n\t\"time\"\n\n\t\"github.com/pgflow-go/pgflow\"\n)\n\nvar _ = time.Second\n\nfunc _() {\n\t" + stmt + "\n}\n"
	}
	compile := func(stmt string) []string {
		return check(unit{pkg: "optcheck", files: []string{wrap(stmt)}}, imp)
	}
	require.Empty(t, compile(`_ = pgflow.NewFlow[int]("f", pgflow.MaxAttempts(3), pgflow.BaseDelay(time.Second), pgflow.Timeout(time.Minute))`),
		"flow options compile on a flow")
	for _, stmt := range []string{
		`_ = pgflow.NewFlow[int]("f", pgflow.StartDelay(time.Second))`,
		`_ = pgflow.NewFlow[int]("f", pgflow.If(map[string]any{"a": 1}))`,
		`_ = pgflow.NewFlow[int]("f", pgflow.IfNot(map[string]any{"a": 1}))`,
		`_ = pgflow.NewFlow[int]("f", pgflow.WhenUnmet(pgflow.Skip))`,
		`_ = pgflow.NewFlow[int]("f", pgflow.WhenExhausted(pgflow.Skip))`,
		`_ = pgflow.NewFlow[int]("f", pgflow.DependsOn())`,
	} {
		problems := compile(stmt)
		require.NotEmpty(t, problems, "%s must not compile", stmt)
		require.Contains(t, problems[0], "does not implement pgflow.FlowOption", stmt)
	}
}
