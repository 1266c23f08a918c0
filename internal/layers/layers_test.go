// Package layers checks the engine's layering: a task's path (poller → claimer → executor → completer → sqlapi)
// reads top to bottom, so no engine package imports one above it, and none imports the public root package.
package layers

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/pgflow-go/pgflow"

// rank orders the engine's parts from the top of a task's path to the bottom; a package may import only parts
// of a higher rank (further down).
var rank = map[string]int{
	"internal/poller":      1,
	"internal/claimer":     2,
	"internal/maintenance": 2,
	"internal/scheduler":   2,
	"internal/executor":    3,
	"internal/completer":   4,
	"internal/observe":     5,
	"internal/sqlapi":      6,
	"internal/notify":      6,
	"internal/pgerr":       7,
	"internal/taskrun":     7,
	"internal/backoff":     8,
}

func TestEnginePackagesImportOnlyDownwards(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/internal/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module+"/")
		from, engine := rank[pkg]
		for _, imp := range fields[1:] {
			if imp == module {
				if engine {
					t.Errorf("%s imports the public root package; the engine must not know it", pkg)
				}
				continue
			}
			to, ok := rank[strings.TrimPrefix(imp, module+"/")]
			if engine && ok && to <= from {
				t.Errorf("%s (rank %d) imports %s (rank %d): a task's path must read top to bottom", pkg, from, imp, to)
			}
		}
		if engine {
			checked++
		}
	}
	require.Equal(t, len(rank), checked, "every engine package was listed")
}
