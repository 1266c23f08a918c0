package runtime_test

import (
	"fmt"
	"testing"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// fullState renders every row of a run exactly (timestamps and message ids included) plus the queue and archive
// of its flow's queue, so "nothing changes" can be asserted byte for byte.
func fullState(t testing.TB, db fx.DB, runID, queue string) string {
	t.Helper()
	return fullRows(t, db, runID) + fullStateQueues(t, db, queue)
}

// fullRows renders the run's rows exactly.
func fullRows(t testing.TB, db fx.DB, runID string) string {
	t.Helper()
	return fx.Val[string](t, db, `select jsonb_build_object(
		'run', (select to_jsonb(r) from pgflow.runs r where r.run_id = $1::uuid),
		'states', (select jsonb_agg(to_jsonb(s) order by s.step_slug) from pgflow.step_states s where s.run_id = $1::uuid),
		'tasks', (select jsonb_agg(to_jsonb(k) order by k.step_slug, k.task_index) from pgflow.step_tasks k where k.run_id = $1::uuid))::text`,
		runID)
}

// rowJSON is one table row as jsonb text.
func rowJSON(t testing.TB, db fx.DB, sql string, args ...any) string {
	t.Helper()
	return fx.Val[string](t, db, "select coalesce(("+sql+")::text, '')", args...)
}

// fullStateQueues is the queue part of fullState.
func fullStateQueues(t testing.TB, db fx.DB, queue string) string {
	t.Helper()
	return fmt.Sprint("|", fx.MessageIDs(fx.QueueMessages(t, db, queue)), "|", fx.MessageIDs(fx.ArchivedMessages(t, db, queue)))
}
