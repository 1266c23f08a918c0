package main

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitDone fails the test unless ctx ends within a generous bound (signal delivery is asynchronous).
func waitDone(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(waitLimit):
		t.Fatalf("%s did not end", what)
	}
}

// The first signal cancels the command's context, the second the context that bounds a worker's graceful stop.
func TestSignalContextFirstAndSecondSignal(t *testing.T) {
	ctx, release := signalContext(context.Background(), syscall.SIGUSR1)
	defer release()
	stopNow := stopNowContext(ctx)
	require.NoError(t, ctx.Err())
	require.NoError(t, stopNow.Err())

	var out bytes.Buffer
	announced := announceInterrupt(ctx, &out, "graceful shutdown began")
	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	waitDone(t, ctx, "the command's context")
	announced()
	require.Equal(t, "graceful shutdown began\n", out.String())
	require.NoError(t, stopNow.Err(), "one signal must not cut the graceful stop short")

	require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGUSR1))
	waitDone(t, stopNow, "the stop-now context")
}

func TestStopNowContextWithoutSignals(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	stopNow := stopNowContext(ctx)
	cancel()
	require.NoError(t, stopNow.Err(), "without signal handling a stop is never cut short")

	var out bytes.Buffer
	release := announceInterrupt(context.Background(), &out, "never")
	release()
	require.Empty(t, out.String())
}
