package schema_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// The declarative schema (sql/core) is the source of truth; the released migrations must build exactly the same
// schema pgflow. This is what keeps the two from drifting apart.
func TestMigrationsMatchCoreSchema(t *testing.T) {
	t.Parallel()
	migrated := pgtest.New(t)
	fromCore := pgtest.NewFromCore(t)

	a := dumpSchema(t, migrated.URL)
	b := dumpSchema(t, fromCore.URL)
	require.NotEmpty(t, a)
	if a != b {
		t.Fatalf("schema pgflow built from the migrations differs from sql/core:\n%s", lineDiff(a, b))
	}
}

// dumpSchema returns a normalised schema-only dump of schema pgflow.
func dumpSchema(t *testing.T, url string) string {
	t.Helper()
	out, err := exec.Command(pgtest.BinPath(t, "pg_dump"), "--schema-only", "--schema=pgflow", "--no-owner",
		"--no-privileges", "--exclude-table=pgflow.schema_migrations", "--dbname="+url).CombinedOutput()
	require.NoError(t, err, "pg_dump: %s", out)
	var kept []string
	for _, line := range strings.Split(string(out), "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "--") || strings.HasPrefix(trimmed, `\restrict`) ||
			strings.HasPrefix(trimmed, `\unrestrict`) {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n")
}

// lineDiff lists the lines only one side has, with a little context, to make a drift readable.
func lineDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	count := func(lines []string) map[string]int {
		m := map[string]int{}
		for _, l := range lines {
			m[l]++
		}
		return m
	}
	ac, bc := count(al), count(bl)
	var sb strings.Builder
	for _, l := range al {
		if bc[l] == 0 {
			fmt.Fprintf(&sb, "- (migrations only) %s\n", l)
		}
	}
	for _, l := range bl {
		if ac[l] == 0 {
			fmt.Fprintf(&sb, "+ (sql/core only)   %s\n", l)
		}
	}
	if sb.Len() == 0 {
		sb.WriteString("same lines, different order (column order or object order differs)\n")
	}
	return sb.String()
}
