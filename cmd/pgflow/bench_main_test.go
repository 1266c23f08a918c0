package main

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/pgflow-go/pgflow/internal/bench"
)

// TestMain lets `bench --mode scale-out` in these tests start this test binary as its worker processes: with
// bench.EnvWorkerProcess set, the binary runs the command line it was given (`bench worker`) instead of the
// tests, like the pgflow binary would.
func TestMain(m *testing.M) {
	if os.Getenv(bench.EnvWorkerProcess) != "" {
		root := newRootCmd()
		root.SetArgs(os.Args[1:])
		if err := root.ExecuteContext(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
