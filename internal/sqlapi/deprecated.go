package sqlapi

import "context"

// The dashboard-named reads that pgflowprom/database.go still calls. pgflowprom is being moved into its own module
// by another change right now, so it keeps compiling against these until it switches to ListFlows and
// ListQueueMetrics; then this file goes.

// DashFlows returns every flow with its steps and run counts.
//
// Deprecated: use ListFlows.
func DashFlows(ctx context.Context, db DBTX) ([]Flow, error) {
	return ListFlows(ctx, db, ListFlowsParams{})
}

// DashQueues reads the metrics of every queue.
//
// Deprecated: use ListQueueMetrics.
func DashQueues(ctx context.Context, db DBTX) (map[string]QueueMetrics, error) {
	return ListQueueMetrics(ctx, db)
}
