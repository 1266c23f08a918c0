package pgflow_test

// Fuzz tests (issue 6): slug validation (Go DSL against pgflow.is_valid_slug), shape comparison (SQL
// _compare_flow_shapes against Go-side equality, and on arbitrary JSON), and DSL validation (every definition the
// DSL accepts is accepted by the database and stored with the same shape). Seed corpora live in testdata/fuzz;
// `go test` runs the seeds, `go test -run=^$ -fuzz=FuzzX -fuzztime=10s .` fuzzes (see .ci/run).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// sqlSafe reports whether s can be sent to PostgreSQL as text (valid UTF-8, no NUL).
func sqlSafe(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// Go's slug validation agrees with pgflow.is_valid_slug: a step slug is valid exactly when the database says so,
// a flow slug exactly when the database says so and it has at most 47 characters (its queue name's limit); a
// refused slug is named in the error.
func FuzzSlugValidation(f *testing.F) {
	for _, s := range append(hostileSlugs, "a", "_", "A_1", "run", "Run", "ab1", strings.Repeat("x", 47), strings.Repeat("x", 48), strings.Repeat("x", 128)) {
		f.Add(s)
	}
	db := pgtest.New(f)
	noop := func(context.Context, *pgflow.Task[any]) (int, error) { return 0, nil }
	f.Fuzz(func(t *testing.T, slug string) {
		flowErr := pgflow.NewFlow[any](slug).Err()
		g := pgflow.NewFlow[any]("ok")
		pgflow.Step(g, slug, noop)
		stepErr := g.Err()
		for _, err := range []error{flowErr, stepErr} {
			if err == nil {
				continue
			}
			if !errors.Is(err, pgflow.ErrInvalidSlug) {
				t.Fatalf("slug %q: error is not ErrInvalidSlug: %v", slug, err)
			}
			if slug != "" && !strings.Contains(err.Error(), strconv.Quote(slug)) {
				t.Fatalf("slug %q: error does not name it: %v", slug, err)
			}
		}
		if !sqlSafe(slug) {
			if flowErr == nil || stepErr == nil {
				t.Fatalf("slug %q (not valid UTF-8 or with NUL) accepted", slug)
			}
			return
		}
		var valid bool
		if err := db.Pool.QueryRow(context.Background(), `select pgflow.is_valid_slug($1)`, slug).Scan(&valid); err != nil {
			t.Fatal(err)
		}
		if (stepErr == nil) != valid {
			t.Fatalf("step slug %q: Go says valid=%v, pgflow.is_valid_slug says %v (Go error: %v)", slug, stepErr == nil, valid, stepErr)
		}
		if (flowErr == nil) != (valid && len(slug) <= 47) {
			t.Fatalf("flow slug %q: Go says valid=%v, SQL is_valid_slug=%v, length %d (Go error: %v)", slug, flowErr == nil, valid, len(slug), flowErr)
		}
	})
}

// fuzzFlow builds a flow definition from fuzz bytes: up to 6 steps (single, map over an earlier step, or map over
// the input), dependencies from bit masks, and options and conditions from the following bytes, some of them out
// of range on purpose. names (comma-separated) overrides step slugs.
func fuzzFlow(slug string, data []byte, names string) *pgflow.Flow[[]int] {
	at := func(i int) byte {
		if i < len(data) {
			return data[i]
		}
		return 0
	}
	f := pgflow.NewFlow[[]int](slug)
	var handles []pgflow.StepHandle[[]int]
	n := int(at(0)%6) + 1
	custom := strings.Split(names, ",")
	for i := range n {
		b := at(1 + i*4)
		slugI := "s" + strconv.Itoa(i)
		if names != "" && i < len(custom) {
			slugI = custom[i]
		}
		var opts []pgflow.StepOption
		o := at(2 + i*4)
		if o&1 != 0 {
			opts = append(opts, pgflow.MaxAttempts(int(int8(at(3+i*4)))))
		}
		if o&2 != 0 {
			opts = append(opts, pgflow.Timeout(time.Duration(int8(at(4+i*4)))*time.Second))
		}
		if o&4 != 0 {
			opts = append(opts, pgflow.WhenExhausted([]pgflow.WhenMode{pgflow.Fail, pgflow.Skip, pgflow.SkipCascade, "bogus"}[o>>6]))
		}
		if o&8 != 0 {
			opts = append(opts, pgflow.StartDelay(time.Duration(int8(at(3+i*4)))*time.Second))
		}
		var deps []pgflow.AnyStep
		for j, h := range handles {
			if at(4+i*4)&(1<<j) != 0 {
				deps = append(deps, h)
			}
		}
		if o&16 != 0 && len(deps) > 0 {
			opts = append(opts, pgflow.If(map[string]any{deps[0].Slug(): map[string]any{"ok": o&32 != 0}}))
			if o&128 != 0 {
				opts = append(opts, pgflow.WhenUnmet(pgflow.SkipCascade))
			}
		}
		switch {
		case b%3 == 1 && len(handles) > 0:
			over := handles[int(b/3)%len(handles)]
			handles = append(handles, pgflow.Map(f, slugI, over, func(context.Context, *pgflow.Task[[]int], int) (int, error) { return 0, nil }, opts...))
		case b%3 == 2:
			handles = append(handles, pgflow.MapInput(f, slugI, func(context.Context, *pgflow.Task[[]int], int) (int, error) { return 0, nil }, opts...))
		default:
			if len(deps) > 0 {
				opts = append(opts, pgflow.DependsOn(deps...))
			}
			handles = append(handles, pgflow.Step(f, slugI, func(context.Context, *pgflow.Task[[]int]) ([]int, error) { return nil, nil }, opts...))
		}
	}
	return f
}

// shapeWithoutOptions removes every "options" key from a shape document and re-encodes it canonically.
func shapeWithoutOptions(t *testing.T, shape json.RawMessage) string {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(shape, &doc); err != nil {
		t.Fatalf("shape %s: %v", shape, err)
	}
	delete(doc, "options")
	for _, s := range doc["steps"].([]any) {
		delete(s.(map[string]any), "options")
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func compareShapes(t *testing.T, pool *pgxpool.Pool, a, b string) ([]string, error) {
	t.Helper()
	var diffs []string
	err := pool.QueryRow(context.Background(), `select pgflow._compare_flow_shapes($1::jsonb, $2::jsonb)`, a, b).Scan(&diffs)
	return diffs, err
}

// pgflow._compare_flow_shapes agrees with Go: two valid DSL flows have no differences exactly when their shapes
// (options removed) are equal, the comparison is reflexive, and its verdict does not depend on argument order.
func FuzzShapeComparison(f *testing.F) {
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 0}, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{3, 0, 4, 5, 0, 1, 0, 0, 1, 2, 0, 0, 3}, []byte{3, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0, 0, 3})
	f.Add([]byte{5, 2, 16, 0, 0, 0, 16, 0, 1, 4, 48, 0, 3}, []byte{5, 2, 16, 0, 0, 0, 48, 0, 1, 4, 16, 0, 3})
	db := pgtest.New(f)
	f.Fuzz(func(t *testing.T, da, dbytes []byte) {
		a, b := fuzzFlow("fz", da, ""), fuzzFlow("fz", dbytes, "")
		sa, errA := a.Shape()
		sb, errB := b.Shape()
		if errA != nil || errB != nil {
			return // invalid definitions are FuzzDSLValidation's subject
		}
		for _, s := range []json.RawMessage{sa, sb} {
			diffs, err := compareShapes(t, db.Pool, string(s), string(s))
			if err != nil || len(diffs) != 0 {
				t.Fatalf("shape %s compared with itself: %v %v", s, diffs, err)
			}
		}
		ab, err := compareShapes(t, db.Pool, string(sa), string(sb))
		if err != nil {
			t.Fatal(err)
		}
		ba, err := compareShapes(t, db.Pool, string(sb), string(sa))
		if err != nil {
			t.Fatal(err)
		}
		equal := shapeWithoutOptions(t, sa) == shapeWithoutOptions(t, sb)
		if equal != (len(ab) == 0) || (len(ab) == 0) != (len(ba) == 0) {
			t.Fatalf("Go equal=%v, SQL differences %q / reversed %q\nA: %s\nB: %s", equal, ab, ba, sa, sb)
		}
	})
}

// pgflow._compare_flow_shapes on arbitrary JSON either answers or raises its documented error ("steps" not an
// array, SQLSTATE 22023); it is reflexive whenever it answers, and its verdict does not depend on argument order.
func FuzzCompareFlowShapesJSON(f *testing.F) {
	f.Add(`{"steps":[]}`, `{"steps":[]}`)
	f.Add(`{"steps":[{"slug":"a","stepType":"single","dependencies":[]}]}`, `{"steps":[{"slug":"a","stepType":"map","dependencies":[]}]}`)
	f.Add(`{"steps":"x"}`, `{}`)
	f.Add(`{"steps":[{"slug":"a","dependencies":"b"}]}`, `{"steps":[{"slug":"a","dependencies":["b"]}]}`)
	f.Add(`{"steps":[1,null,"s",[]]}`, `[]`)
	f.Add(`{"steps":[{"requiredInputPattern":{"defined":true,"value":{"a":1}}}]}`, `{"steps":[{"requiredInputPattern":{"defined":false}}]}`)
	db := pgtest.New(f)
	f.Fuzz(func(t *testing.T, a, b string) {
		if !json.Valid([]byte(a)) || !json.Valid([]byte(b)) || !sqlSafe(a+b) {
			return
		}
		ctx := context.Background()
		// What jsonb refuses (e.g. \u0000 escapes) never reaches the function.
		var ok bool
		if err := db.Pool.QueryRow(ctx, `select $1::jsonb is not null and $2::jsonb is not null`, a, b).Scan(&ok); err != nil {
			return
		}
		documented := func(err error) bool {
			var pgErr *pgconn.PgError
			return errors.As(err, &pgErr) && pgErr.Code == "22023" && strings.Contains(pgErr.Message, `has "steps" of type`)
		}
		for _, s := range []string{a, b} {
			diffs, err := compareShapes(t, db.Pool, s, s)
			if err != nil {
				if !documented(err) {
					t.Fatalf("compare(%s, itself): undocumented error %v", s, err)
				}
				continue
			}
			if len(diffs) != 0 {
				t.Fatalf("compare(%s, itself) = %q", s, diffs)
			}
		}
		ab, errAB := compareShapes(t, db.Pool, a, b)
		ba, errBA := compareShapes(t, db.Pool, b, a)
		if (errAB != nil && !documented(errAB)) || (errBA != nil && !documented(errBA)) {
			t.Fatalf("compare(%s, %s): undocumented error %v / %v", a, b, errAB, errBA)
		}
		if errAB == nil && errBA == nil && (len(ab) == 0) != (len(ba) == 0) {
			t.Fatalf("compare(%s, %s) = %q but reversed %q", a, b, ab, ba)
		}
	})
}

// Every definition the DSL accepts is accepted by the database as is: its CompileSQL statements run, and
// ensure_flow_compiled verifies the stored flow against Shape. Every definition it refuses is refused with
// *DefinitionError values that name the flow and say what is wrong, and neither Shape nor CompileSQL produce
// anything. Nothing panics.
func FuzzDSLValidation(f *testing.F) {
	f.Add([]byte{0}, "")
	f.Add([]byte{2, 0, 1, 3, 0, 1, 3, 5, 1}, "")
	f.Add([]byte{3, 2, 1, 0, 0, 0, 255, 200, 0, 1, 6, 0, 3}, "a,b,c")
	f.Add([]byte{1, 0, 15, 255, 255, 4, 3, 1, 1}, "x'; drop table pgflow.runs; --,run")
	f.Add([]byte{5, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0, 3, 0, 16, 0, 7, 2, 0, 0, 0}, "")
	db := pgtest.New(f)
	f.Fuzz(func(t *testing.T, data []byte, names string) {
		fl := fuzzFlow("fz", data, names)
		defErr := fl.Err()
		shape, shapeErr := fl.Shape()
		stmts, sqlErr := fl.CompileSQL()
		if defErr != nil {
			if shapeErr == nil || sqlErr == nil {
				t.Fatalf("invalid definition (%v) but Shape/CompileSQL succeeded", defErr)
			}
			var joined interface{ Unwrap() []error }
			list := []error{defErr}
			if errors.As(defErr, &joined) {
				list = joined.Unwrap()
			}
			for _, e := range list {
				var de *pgflow.DefinitionError
				if !errors.As(e, &de) || de.Flow != "fz" || de.Detail == "" || de.Err == nil {
					t.Fatalf("definition error %T %v does not name the flow, kind and detail", e, e)
				}
			}
			return
		}
		if shapeErr != nil || sqlErr != nil {
			t.Fatalf("valid definition but Shape: %v, CompileSQL: %v", shapeErr, sqlErr)
		}
		ctx := context.Background()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				t.Fatalf("the database refuses a definition the DSL accepted: %s: %v\nshape: %s", s, err, shape)
			}
		}
		var res json.RawMessage
		if err := tx.QueryRow(ctx, `select pgflow.ensure_flow_compiled('fz', $1::jsonb)`, string(shape)).Scan(&res); err != nil {
			t.Fatalf("ensure_flow_compiled: %v", err)
		}
		if !bytes.Contains(res, []byte(`"verified"`)) {
			t.Fatalf("stored flow differs from Shape: %s\nshape: %s\nstatements:\n%s", res, shape, strings.Join(stmts, "\n"))
		}
	})
}
