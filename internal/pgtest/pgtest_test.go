package pgtest_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/pgtest"
)

func TestDatabasesAreIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := pgtest.NewEmpty(t), pgtest.NewEmpty(t)
	require.NotEqual(t, a.Name, b.Name)
	_, err := a.Pool.Exec(ctx, "create table public.only_in_a (id int)")
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.Pool.QueryRow(ctx, "select to_regclass('public.only_in_a') is not null").Scan(&exists))
	require.False(t, exists, "a table created in one test database is visible in another")
}

func TestNewHasPGMQAndPgflow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var pgmq bool
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"select to_regprocedure('pgmq.send(text,jsonb)') is not null").Scan(&pgmq))
	require.True(t, pgmq)
}

func TestSearchPathIsEmpty(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	var sp string
	require.NoError(t, db.Pool.QueryRow(context.Background(), "show search_path").Scan(&sp))
	require.Contains(t, []string{`""`, ""}, sp)
}

// The throwaway cluster must disappear when the test binary dies, even by panic.
func TestClusterIsRemovedAfterPanic(t *testing.T) {
	if os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("uses an external server; no throwaway cluster to clean up")
	}
	if os.Getenv("PGTEST_CHILD_PANIC") == "1" {
		db := pgtest.NewEmpty(t)
		var dir string
		require.NoError(t, db.Pool.QueryRow(context.Background(), "show data_directory").Scan(&dir))
		os.Stdout.WriteString("DATADIR=" + dir + "\n")
		panic("deliberate panic to test cleanup")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterIsRemovedAfterPanic$", "-test.v")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD_PANIC=1")
	out, _ := cmd.CombinedOutput()
	var dataDir string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "DATADIR="); ok {
			dataDir = rest
		}
	}
	require.NotEmpty(t, dataDir, "child did not report its data directory:\n%s", out)
	require.Contains(t, string(out), "deliberate panic")
	require.Eventually(t, func() bool {
		_, err := os.Stat(dataDir)
		return os.IsNotExist(err)
	}, 30*time.Second, 100*time.Millisecond, "cluster directory %s survived its test binary", dataDir)
}
