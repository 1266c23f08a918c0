package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
)

// stopNowKey is the context key of the context that the second signal ends.
type stopNowKey struct{}

// signalContext returns a context that the first of sigs cancels. It carries a second context, returned by
// stopNowContext, that the second signal cancels: commands that run a worker stop it gracefully on the first
// signal and at once on the second. release stops catching the signals.
func signalContext(parent context.Context, sigs ...os.Signal) (ctx context.Context, release func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, sigs...)
	stopNow, cancelStopNow := context.WithCancel(context.WithoutCancel(parent))
	ctx, cancel := context.WithCancel(context.WithValue(parent, stopNowKey{}, stopNow))
	done := make(chan struct{})
	go func() {
		for _, end := range []context.CancelFunc{cancel, cancelStopNow} {
			select {
			case <-ch:
				end()
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
		cancelStopNow()
	}
}

// stopNowContext returns the context the second signal ends (see signalContext), to bound a worker's graceful
// stop with. Without one in ctx (tests), it is ctx without its cancellation: the stop runs to its end.
func stopNowContext(ctx context.Context) context.Context {
	if c, ok := ctx.Value(stopNowKey{}).(context.Context); ok {
		return c
	}
	return context.WithoutCancel(ctx)
}

// announceInterrupt writes msg to w once ctx ends (the first signal), until release is called: commands running
// workers say that a graceful shutdown began and that a second signal stops at once.
func announceInterrupt(ctx context.Context, w io.Writer, msg string) (release func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			fmt.Fprintln(w, msg)
		case <-done:
			// Both may be ready when release comes right after the signal: a signal that arrived first is
			// still announced.
			if ctx.Err() != nil {
				fmt.Fprintln(w, msg)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
