package runtime_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

// clockMillis is the server's clock_timestamp() in Unix milliseconds, rounded down as pgflow._new_run_id does.
const clockMillis = `select floor(extract(epoch from clock_timestamp()) * 1000)::int8`

// v7Millis checks that id (canonical text) has the version 7 layout with the RFC variant and returns the Unix
// milliseconds in its first 48 bits.
func v7Millis(t *testing.T, id string) int64 {
	t.Helper()
	require.Len(t, id, 36, "canonical uuid text: %s", id)
	require.Equal(t, byte('7'), id[14], "version nibble of %s", id)
	require.Contains(t, "89ab", string(id[19]), "variant bits 10 of %s", id)
	ms, err := strconv.ParseInt(strings.ReplaceAll(id[:13], "-", ""), 16, 64)
	require.NoError(t, err, id)
	return ms
}

func setupOneStepFlow(t *testing.T, db fx.DB, slug string) {
	t.Helper()
	fx.Exec(t, db, fmt.Sprintf("select pgflow.create_flow('%s'); select pgflow.add_step('%s', 'a')", slug, slug))
}

// start_flows without run_ids makes time-ordered ids: all distinct, version 7, RFC variant, and their timestamps
// within the clock readings taken just before and just after the call. Their step states and tasks carry them.
func TestStartFlowsMakesVersion7RunIDs(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	setupOneStepFlow(t, db, "ids")

	const n = 1000
	inputs := make([]string, n)
	for i := range inputs {
		inputs[i] = fmt.Sprintf(`{"i": %d}`, i)
	}
	lo := fx.Val[int64](t, db, clockMillis)
	ids := fx.Val[[]string](t, db, `select array_agg(r.run_id::text) from pgflow.start_flows('ids', $1::jsonb[]) as r`, inputs)
	hi := fx.Val[int64](t, db, clockMillis)

	require.Len(t, ids, n)
	seen := make(map[string]bool, n)
	for _, id := range ids {
		require.False(t, seen[id], "run id %s made twice", id)
		seen[id] = true
		ms := v7Millis(t, id)
		require.GreaterOrEqual(t, ms, lo, "timestamp of %s before the call", id)
		require.LessOrEqual(t, ms, hi, "timestamp of %s after the call", id)
	}
	require.Equal(t, n, fx.Val[int](t, db, `select count(distinct s.run_id)::int from pgflow.step_states as s where s.run_id = any ($1::uuid[])`, ids))
	require.Equal(t, n, fx.Val[int](t, db, `select count(distinct t.run_id)::int from pgflow.step_tasks as t where t.run_id = any ($1::uuid[])`, ids))
}

// Starts in different milliseconds make ids in the order of the starts (uuid order), for start_flow and
// start_flows alike: a later start's runs land after an earlier one's in every index led by run_id.
func TestRunIDsOfLaterStartsSortAfter(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	setupOneStepFlow(t, db, "ids")

	first := fx.Val[string](t, db, `select r.run_id::text from pgflow.start_flow('ids', '{}') as r`)
	fx.Exec(t, db, "select pg_sleep(0.002)")
	second := fx.Val[string](t, db, `select r.run_id::text from pgflow.start_flow('ids', '{}') as r`)
	require.True(t, fx.Val[bool](t, db, "select $1::uuid < $2::uuid", first, second), "%s then %s", first, second)
	require.Less(t, v7Millis(t, first), v7Millis(t, second))

	batch1 := fx.Val[[]string](t, db, `select array_agg(r.run_id::text) from pgflow.start_flows('ids', array['{}', '{}', '{}']::jsonb[]) as r`)
	fx.Exec(t, db, "select pg_sleep(0.002)")
	batch2 := fx.Val[[]string](t, db, `select array_agg(r.run_id::text) from pgflow.start_flows('ids', array['{}', '{}', '{}']::jsonb[]) as r`)
	require.True(t, fx.Val[bool](t, db, `select not exists (
			select from unnest($1::uuid[]) as a (id), unnest($2::uuid[]) as b (id) where a.id >= b.id)`,
		batch1, batch2), "every id of the later call sorts after every id of the earlier one: %v, %v", batch1, batch2)
}

// A caller's run id wins over the generated one (any version: this one is version 4), in start_flow, in
// start_flows next to generated ones, and as an explicit column value; the column default is version 7 too.
func TestGivenRunIDsAreKept(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	setupOneStepFlow(t, db, "ids")

	const given = "0f8fad5b-d9cb-469f-a165-70867728950e"
	require.Equal(t, given, fx.Val[string](t, db, `select r.run_id::text from pgflow.start_flow('ids', '{}', $1::uuid) as r`, given))

	const given2 = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	ids := fx.Val[[]string](t, db, `select array_agg(r.run_id::text) from pgflow.start_flows('ids', array['{}', '{}']::jsonb[], array[null, $1::uuid]) as r`, given2)
	require.Len(t, ids, 2)
	v7Millis(t, ids[0])
	require.Equal(t, given2, ids[1])

	lo := fx.Val[int64](t, db, clockMillis)
	byDefault := fx.Val[string](t, db, `insert into pgflow.runs (flow_slug, input) values ('ids', '{}') returning run_id::text`)
	hi := fx.Val[int64](t, db, clockMillis)
	ms := v7Millis(t, byDefault)
	require.GreaterOrEqual(t, ms, lo)
	require.LessOrEqual(t, ms, hi)
}

// The timestamp is the call's clock, not the transaction's start: two ids made in one transaction with a sleep
// between them are ordered, and the random part differs between ids of the same millisecond.
func TestNewRunIDUsesTheCallsClock(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	ordered := fx.Val[bool](t, db, `
		with a as materialized (select pgflow._new_run_id() as id),
		     s as materialized (select pg_sleep(0.002) from a),
		     b as materialized (select pgflow._new_run_id() as id from s)
		select a.id < b.id from a, b`)
	require.True(t, ordered)
	require.Equal(t, 10000, fx.Val[int](t, db, `select count(distinct pgflow._new_run_id())::int from generate_series(1, 10000)`))
}

// pgflow._new_run_ids(n) makes n distinct version 7 ids in one call, in the order it made them (their timestamps
// never decrease along the array and lie between clock readings taken around the call); n 0, negative or NULL
// makes none.
func TestNewRunIDsMakesABatchInOrder(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	for _, n := range []string{"0", "-3", "null"} {
		require.Equal(t, 0, fx.Val[int](t, db, `select cardinality(pgflow._new_run_ids(`+n+`::integer))`), "n = %s", n)
	}

	const n = 20000
	lo := fx.Val[int64](t, db, clockMillis)
	ids := fx.Val[[]string](t, db, `select pgflow._new_run_ids($1)::text[]`, n)
	hi := fx.Val[int64](t, db, clockMillis)
	require.Len(t, ids, n)
	seen := make(map[string]bool, n)
	prev := lo
	for i, id := range ids {
		require.False(t, seen[id], "run id %s made twice", id)
		seen[id] = true
		ms := v7Millis(t, id)
		require.GreaterOrEqual(t, ms, prev, "id %d (%s) has an earlier timestamp than the one before it", i, id)
		prev = ms
	}
	require.LessOrEqual(t, prev, hi, "timestamp of the last id after the call")
}
