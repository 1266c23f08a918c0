package runtime_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	fx "github.com/pgflow-go/pgflow/internal/coretest/fixture"
)

func TestSetVTBatch(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgmq.create('q')")
	ids := fx.Val[[]int64](t, db, `select array_agg(id order by id) from pgmq.send_batch('q',
		array['{"a":1}', '{"a":2}', '{"a":3}']::jsonb[]) as id`)
	fx.ReadMessages(t, db, "q", 0, 3) // read_ct 1 each

	rows, err := db.Query(fx.Ctx(t), `select msg_id, read_ct, extract(epoch from vt - clock_timestamp())::float8,
		message::text, headers::text from pgflow.set_vt_batch('q', $1, array[10, 0, 100, 5]) order by msg_id`,
		[]int64{ids[0], ids[1], ids[2], 999999})
	require.NoError(t, err)
	type row struct {
		id      int64
		readCt  int
		in      float64
		msg     string
		headers *string
	}
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.id, &r.readCt, &r.in, &r.msg, &r.headers))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 3, "the unknown id 999999 is not returned")
	for i, want := range []float64{10, 0, 100} {
		require.Equal(t, ids[i], got[i].id)
		require.Equal(t, 1, got[i].readCt, "read_ct is unchanged")
		require.InDelta(t, want, got[i].in, 1.5)
		require.InDelta(t, want, fx.VisibleIn(t, db, "q", ids[i]), 1.5)
	}
	require.Equal(t, `{"a": 1}`, got[0].msg)

	// Unknown ids are not returned; NULL or empty arrays return nothing.
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.set_vt_batch('q', array[999999::bigint], array[5])"))
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.set_vt_batch('q', null, array[5])"))
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.set_vt_batch('q', array[1::bigint], null)"))
	require.Equal(t, 0, fx.Val[int](t, db, "select count(*)::int from pgflow.set_vt_batch('q', '{}'::bigint[], '{}'::int[])"))
}

func TestSetVTBatchErrors(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgmq.create('q')")
	_, err := db.Exec(fx.Ctx(t), "select * from pgflow.set_vt_batch('q', array[1, 2]::bigint[], array[1])")
	requirePgError(t, err, "P0001", "msg_ids length (2) must equal vt_offsets length (1)")
	_, err = db.Exec(fx.Ctx(t), "select * from pgflow.set_vt_batch('nonexistent_queue', array[1]::bigint[], array[1])")
	requirePgError(t, err, "42P01", `relation "pgmq.q_nonexistent_queue" does not exist`)
}

// Mixed-case queue names resolve to PGMQ's lower-case table.
func TestSetVTBatchMixedCaseQueue(t *testing.T) {
	t.Parallel()
	db := newDB(t).Pool
	fx.Exec(t, db, "select pgmq.create('MixedCase')")
	id := fx.Val[int64](t, db, `select pgmq.send('MixedCase', '{}'::jsonb)`)
	require.Equal(t, 1, fx.Val[int](t, db, "select count(*)::int from pgflow.set_vt_batch('MixedCase', array[$1::bigint], array[50])", id))
	require.InDelta(t, 50, fx.VisibleIn(t, db, "mixedcase", id), 1.5)
}
