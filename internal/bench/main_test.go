package bench

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// TestMain lets the scale-out test use this test binary as its worker process: started with EnvWorkerProcess
// set, the binary runs WorkerProcessMain instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv(EnvWorkerProcess) != "" {
		if err := WorkerProcessMain(context.Background(), os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
