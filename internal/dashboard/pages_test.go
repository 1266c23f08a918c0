package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

func TestFlowsPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})

	body := e.ok("/flows")
	require.Contains(t, body, "No flows yet")

	defineDiamond(t, e.db.Pool, "diamond")
	defineFan(t, e.db.Pool, "fan")
	done := startRun(t, e.db.Pool, "diamond", `{}`)
	runToEnd(t, e.db.Pool, "diamond", func(claimed) string { return `1` })
	require.Equal(t, "completed", runStatus(t, e.db.Pool, done))
	startRun(t, e.db.Pool, "diamond", `{}`) // started: its root task waits in the queue
	startRun(t, e.db.Pool, "diamond", `{}`)
	failed := startRun(t, e.db.Pool, "fan", `{}`)
	e.exec(`update pgflow.steps set opt_max_attempts = 1 where flow_slug = 'fan'`)
	for _, c := range claim(t, e.db.Pool, "fan") {
		failTask(t, e.db.Pool, c, "boom")
	}
	require.Equal(t, "failed", runStatus(t, e.db.Pool, failed))

	body = e.ok("/flows")
	row := tableRow(t, body, `data-flow="diamond"`)
	require.Contains(t, row, `href="/flows/diamond"`)
	require.Contains(t, row, `<span class="count">4</span>`)
	for _, s := range []string{"a", "b", "c", "d"} {
		require.Contains(t, row, `<span class="step-name">`+s+`</span>`)
	}
	require.Contains(t, row, "2 running")
	require.Contains(t, row, "1 completed")
	require.Contains(t, row, "0 failed")
	// Two started runs leave their root tasks in the queue (read by nobody: both visible).
	require.Contains(t, row, `<span class="queue-length">2</span> queued, 2 visible`)
	require.Contains(t, row, "4 attempts · 2s base delay · 20s timeout")

	row = tableRow(t, body, `data-flow="fan"`)
	require.Contains(t, row, "0 running")
	require.Contains(t, row, "1 failed")
	require.Contains(t, row, `<sup title="map step">map</sup>`)
	require.Contains(t, row, `<span class="queue-length">0</span> queued`)

	// A flow whose queue is gone shows that instead of failing the page.
	e.exec(`select pgmq.drop_queue('fan')`)
	row = tableRow(t, e.ok("/flows"), `data-flow="fan"`)
	require.Contains(t, row, "no queue")

	// The root redirects to the flow list.
	r := e.get("/")
	require.Equal(t, http.StatusSeeOther, r.Status)
	require.Equal(t, "/flows", r.Header.Get("Location"))
}

// tableRow returns the <tr> that contains marker.
func tableRow(t *testing.T, body, marker string) string {
	t.Helper()
	i := strings.Index(body, marker)
	require.GreaterOrEqual(t, i, 0, "no %s in page", marker)
	start := strings.LastIndex(body[:i+len(marker)], "<tr")
	require.GreaterOrEqual(t, start, 0, "%s is not in a table row", marker)
	end := strings.Index(body[i:], "</tr>")
	require.GreaterOrEqual(t, end, 0)
	return body[start : i+end]
}

func TestFlowPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	e.exec(`select pgflow.add_step('diamond', 'gated', array['d'], required_input_pattern => '{"d": {"ok": true}}',
	          forbidden_input_pattern => '{"d": {"blocked": true}}', when_unmet => 'skip-cascade', when_exhausted => 'skip')`)
	var runs []string
	for range 3 {
		runs = append(runs, startRun(t, e.db.Pool, "diamond", `{}`))
	}

	body := e.ok("/flows/diamond")
	svg := between(t, body, `<svg class="dag"`, `</svg>`)
	require.Equal(t, 5, countOccurrences(svg, `<g class="node `), "one node per step")
	require.Equal(t, 5, countOccurrences(svg, `<path class="edge `), "one path per dependency")
	for _, s := range []string{"a", "b", "c", "d", "gated"} {
		require.Contains(t, svg, `data-step="`+s+`"`)
	}

	row := tableRow(t, body, `<tr data-step="b"`)
	require.Contains(t, row, `<span class="">7</span>`)           // own max_attempts
	require.Contains(t, row, `<span class="inherited">2</span>s`) // base_delay from the flow
	require.Contains(t, row, `<span class="">9</span>s`)          // own timeout
	require.Contains(t, row, `<span class="">0</span>s`)          // start_delay set explicitly
	row = tableRow(t, body, `<tr data-step="c"`)
	require.Contains(t, row, `<span class="inherited">4</span>`)
	require.Contains(t, row, `<span class="inherited">20</span>s`)
	require.Contains(t, row, `<span class="inherited">0</span>s`) // start_delay default
	row = tableRow(t, body, `<tr data-step="gated"`)
	require.Contains(t, row, `if <code>{&#34;d&#34;: {&#34;ok&#34;: true}}</code>`)
	require.Contains(t, row, `if not <code>{&#34;d&#34;: {&#34;blocked&#34;: true}}</code>`)
	require.Contains(t, row, "skip-cascade")
	require.Contains(t, row, "<td><code>diamond</code></td>", "the step's queue")
	require.Contains(t, body, "queue <code>diamond</code>: 3 queued, 3 visible")

	for _, id := range runs {
		require.Contains(t, body, `href="/runs/`+id+`"`)
	}
	require.Contains(t, body, "All 3 runs of this flow")

	r := e.get("/flows/nope")
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Contains(t, r.Body, "there is no flow &#34;nope&#34;")
}

func between(t *testing.T, s, from, to string) string {
	t.Helper()
	i := strings.Index(s, from)
	require.GreaterOrEqual(t, i, 0, "no %q", from)
	j := strings.Index(s[i:], to)
	require.GreaterOrEqual(t, j, 0, "no %q after %q", to, from)
	return s[i : i+j+len(to)]
}

var runLinkRE = regexp.MustCompile(`<tr data-run="([0-9a-f-]{36})" data-status="([a-z]+)">`)

// listedRuns returns the run ids (and statuses) of a run table, in page order.
func listedRuns(body string) (ids, statuses []string) {
	for _, m := range runLinkRE.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
		statuses = append(statuses, m[2])
	}
	return ids, statuses
}

func TestRunsPaginationAndFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "alpha")
	defineDiamond(t, e.db.Pool, "beta")

	// Seven runs of alpha and two of beta. The two newest alpha runs are completed; start times are set so that
	// alpha[0] is the oldest run and beta's runs are newer than all of alpha's.
	done := []string{startRun(t, e.db.Pool, "alpha", `{"n": 5}`), startRun(t, e.db.Pool, "alpha", `{"n": 6}`)}
	runToEnd(t, e.db.Pool, "alpha", func(claimed) string { return `null` })
	var alpha []string
	for i := range 5 {
		alpha = append(alpha, startRun(t, e.db.Pool, "alpha", fmt.Sprintf(`{"n": %d}`, i)))
	}
	alpha = append(alpha, done...)
	for i, id := range alpha {
		e.exec(`update pgflow.runs set started_at = now() - make_interval(mins => $2) where run_id = $1::uuid`, id, 100-i)
	}
	var beta []string
	for i := range 2 {
		id := startRun(t, e.db.Pool, "beta", `{}`)
		e.exec(`update pgflow.runs set started_at = now() - make_interval(mins => $2) where run_id = $1::uuid`, id, 50-i)
		beta = append(beta, id)
	}
	for i, id := range alpha {
		want := "started"
		if i >= 5 {
			want = "completed"
		}
		require.Equal(t, want, runStatus(t, e.db.Pool, id))
	}

	newestFirst := func(ids []string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[len(ids)-1-i] = id
		}
		return out
	}

	// All runs, newest first: beta (newer) before alpha.
	ids, _ := listedRuns(e.ok("/runs"))
	require.Equal(t, append(newestFirst(beta), newestFirst(alpha)...), ids)

	// Pages of three for alpha.
	var seen []string
	for page, want := range []int{3, 3, 1} {
		body := e.ok(fmt.Sprintf("/runs?flow=alpha&limit=3&page=%d", page+1))
		ids, _ := listedRuns(body)
		require.Len(t, ids, want, "page %d", page+1)
		seen = append(seen, ids...)
		require.Contains(t, body, fmt.Sprintf("Page %d of 3", page+1))
		if page < 2 {
			require.Contains(t, body, fmt.Sprintf(`href="/runs?flow=alpha&amp;limit=3&amp;page=%d"`, page+2))
		} else {
			require.NotContains(t, body, "Older →")
		}
		if page == 0 {
			require.NotContains(t, body, "← Newer")
		}
	}
	require.Equal(t, newestFirst(alpha), seen)
	require.Contains(t, e.ok("/runs?flow=alpha&limit=3&page=3"), "Runs 7–7 of 7")

	// Status filters.
	ids, statuses := listedRuns(e.ok("/runs?flow=alpha&status=completed"))
	require.Equal(t, newestFirst(alpha[5:]), ids)
	require.Equal(t, []string{"completed", "completed"}, statuses)
	ids, _ = listedRuns(e.ok("/runs?status=started"))
	require.Equal(t, append(newestFirst(beta), newestFirst(alpha[:5])...), ids)
	ids, _ = listedRuns(e.ok("/runs?status=failed"))
	require.Empty(t, ids)

	// Beyond the last page: empty, with a way back.
	body := e.ok("/runs?flow=alpha&limit=3&page=9")
	ids, _ = listedRuns(body)
	require.Empty(t, ids)
	require.Contains(t, body, `href="/runs?flow=alpha&amp;limit=3&amp;page=3"`)

	// Bad parameters are rejected, naming the value.
	r := e.get("/runs?status=weird")
	require.Equal(t, http.StatusBadRequest, r.Status)
	require.Contains(t, r.Body, "&#34;weird&#34;")
	r = e.get("/runs?page=0")
	require.Equal(t, http.StatusBadRequest, r.Status)
	r = e.get("/runs?limit=abc")
	require.Equal(t, http.StatusBadRequest, r.Status)

	// The fragment is the live part only, with the same rows.
	frag := e.ok("/runs?flow=beta&fragment=1")
	require.NotContains(t, frag, "<html")
	ids, _ = listedRuns(frag)
	require.Equal(t, newestFirst(beta), ids)
}

func TestRunPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineFan(t, e.db.Pool, "fan")
	e.exec(`update pgflow.steps set opt_max_attempts = 2 where flow_slug = 'fan' and step_slug = 'each'`)
	id := startRun(t, e.db.Pool, "fan", `{"items": 3}`)

	body := e.ok("/runs/" + id)
	require.Contains(t, body, `id="run-status" class="status status-started" data-status="started">started</span>`)
	require.Contains(t, body, `data-events="/events?run=`+id+`"`)
	svg := between(t, body, `<svg class="dag"`, `</svg>`)
	require.Equal(t, 3, countOccurrences(svg, `<g class="node `))
	require.Contains(t, svg, `<g class="node status-started type-single" data-step="prep"`)
	require.Contains(t, svg, `<g class="node status-created type-map" data-step="each"`)
	require.Contains(t, body, "&#34;items&#34;: 3") // the input, pretty-printed and escaped

	// prep outputs the array; each maps over it.
	for _, c := range claim(t, e.db.Pool, "fan") {
		completeTask(t, e.db.Pool, c, `["x", "y", "z"]`)
	}
	cs := claim(t, e.db.Pool, "fan")
	require.Len(t, cs, 3)
	for _, c := range cs {
		switch c.TaskIndex {
		case 0:
			completeTask(t, e.db.Pool, c, `{"upper": "X"}`)
		case 1:
			failTask(t, e.db.Pool, c, "flaky network") // retried: max_attempts 2
		}
	}
	task2 := cs[2]
	require.Equal(t, 2, task2.TaskIndex)
	body = e.ok("/runs/" + id)
	step := between(t, body, `id="step-each"`, `</article>`)
	require.Contains(t, step, `<span class="status status-started">started</span>`)
	require.Contains(t, step, "1 of 3 done")
	tasks := between(t, step, `<table class="grid tasks">`, `</table>`)
	require.Equal(t, 3, countOccurrences(tasks, `<tr data-task=`))
	require.Contains(t, tasks, `<tr data-task="0" data-status="completed">`)
	require.Contains(t, tasks, `<tr data-task="1" data-status="queued">`)
	require.Contains(t, tasks, `<tr data-task="2" data-status="started">`)
	require.Contains(t, tasks, "flaky network")
	require.Contains(t, tasks, "&#34;upper&#34;: &#34;X&#34;")
	require.Contains(t, tasks, "&#34;y&#34;") // task 1's input: element 1 of prep's output
	prep := between(t, body, `id="step-prep"`, `</article>`)
	require.Contains(t, prep, "Attempts</dt><dd>1 of 3")

	// Finish: task 2 completes, task 1 succeeds on its second attempt (made visible at once), then "total".
	completeTask(t, e.db.Pool, task2, `{"upper": "Z"}`)
	e.exec(`update pgmq.q_fan set vt = now()`)
	runToEnd(t, e.db.Pool, "fan", func(c claimed) string {
		if c.StepSlug == "total" {
			return `{"count": 3}`
		}
		return `"done"`
	})
	require.Equal(t, "completed", runStatus(t, e.db.Pool, id))
	body = e.ok("/runs/" + id)
	require.Contains(t, body, `data-status="completed">completed</span>`)
	require.NotContains(t, body, `data-events=`, "a finished run needs no event stream")
	require.Contains(t, body, "<h2>Output</h2>")
	require.Contains(t, body, "&#34;count&#34;: 3")
	step = between(t, body, `id="step-each"`, `</article>`)
	require.Contains(t, step, "Retries</dt><dd>1 ")
	timeline := between(t, body, `<svg class="timeline"`, `</svg>`)
	require.Equal(t, 3, countOccurrences(timeline, `<g class="bar status-completed"`))

	r := e.get("/runs/00000000-0000-4000-8000-000000000000")
	require.Equal(t, http.StatusNotFound, r.Status)
	r = e.get("/runs/not-a-uuid")
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Contains(t, r.Body, "not a run id")
}

func TestRunPageFailedRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	e.exec(`update pgflow.flows set opt_max_attempts = 1 where flow_slug = 'diamond'`)
	id := startRun(t, e.db.Pool, "diamond", `{}`)
	for _, c := range claim(t, e.db.Pool, "diamond") {
		failTask(t, e.db.Pool, c, "database unreachable")
	}
	require.Equal(t, "failed", runStatus(t, e.db.Pool, id))

	body := e.ok("/runs/" + id)
	require.Contains(t, body, `data-status="failed">failed</span>`)
	require.Contains(t, between(t, body, `id="step-a"`, `</article>`), `<pre class="error">database unreachable</pre>`)
	require.Contains(t, between(t, body, `<svg class="dag"`, `</svg>`), `<g class="node status-failed type-single" data-step="a"`)

	ids, _ := listedRuns(e.ok("/runs?status=failed"))
	require.Equal(t, []string{id}, ids)
	require.Contains(t, tableRow(t, e.ok("/runs"), `data-run="`+id+`"`), "database unreachable")
}

// TestEscaping puts markup into every kind of user data the pages show: inputs, outputs, error messages.
func TestEscaping(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	evilJSON, err := json.Marshal(map[string]string{"html": evil})
	require.NoError(t, err)
	id := startRun(t, e.db.Pool, "diamond", string(evilJSON))
	for _, c := range claim(t, e.db.Pool, "diamond") {
		completeTask(t, e.db.Pool, c, string(evilJSON))
	}
	e.exec(`update pgflow.steps set opt_max_attempts = 1 where flow_slug = 'diamond'`)
	for _, c := range claim(t, e.db.Pool, "diamond") {
		if c.StepSlug == "b" {
			failTask(t, e.db.Pool, c, evil)
		}
	}
	require.Equal(t, "failed", runStatus(t, e.db.Pool, id))

	for _, path := range []string{"/runs/" + id, "/runs", "/flows", "/flows/diamond", "/runs/" + id + "?fragment=1"} {
		body := e.ok(path)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<img src=x", path)
	}
	body := e.ok("/runs/" + id)
	require.Contains(t, body, `&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;`)
	// The input and outputs, pretty-printed, with the markup as text.
	require.Contains(t, body, `&#34;html&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;`)
	require.Contains(t, tableRow(t, e.ok("/runs"), `data-run="`+id+`"`), "&lt;script&gt;alert(1)")

	// A step slug cannot carry markup (slugs are [A-Za-z0-9_]), but the flow page is escaped anyway; the
	// full-JSON endpoint serves JSON, never HTML.
	r := e.get("/runs/" + id + "/json?part=input")
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
	require.Equal(t, "nosniff", r.Header.Get("X-Content-Type-Options"))
	require.Contains(t, r.Header.Get("Content-Security-Policy"), "script-src 'self'")

	// The scripts a page loads are only the dashboard's own.
	require.Equal(t, 1, countOccurrences(body, "<script"))
	require.Contains(t, body, `<script src="/static/app.js" defer></script>`)
}

func TestTruncatedOutputs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineFan(t, e.db.Pool, "fan")
	id := startRun(t, e.db.Pool, "fan", `{}`)
	big := `"` + strings.Repeat("x", 100_000) + `<b>end</b>"`
	for _, c := range claim(t, e.db.Pool, "fan") {
		completeTask(t, e.db.Pool, c, `[`+big+`, "small"]`)
	}
	for _, c := range claim(t, e.db.Pool, "fan") {
		if c.TaskIndex == 0 {
			completeTask(t, e.db.Pool, c, big)
		} else {
			completeTask(t, e.db.Pool, c, `"tiny"`)
		}
	}

	body := e.ok("/runs/" + id)
	require.Less(t, len(body), 600_000, "a page does not carry whole large documents")
	require.NotContains(t, body, "&lt;b&gt;end&lt;/b&gt;", "the end of a large document is cut")
	prep := between(t, body, `id="step-prep"`, `</article>`)
	require.Contains(t, prep, "Shown: the first 65536 characters of")
	require.Contains(t, prep, `<a href="/runs/`+id+`/json?part=step&amp;step=prep">Open the whole document</a>`)
	tasks := between(t, body, `id="step-each"`, `</article>`)
	require.Contains(t, tasks, `/runs/`+id+`/json?part=task&amp;step=each&amp;task=0`)
	require.Contains(t, tasks, "&#34;tiny&#34;")
	// Cut: the step's aggregated output and task 0's output (both linked) and task 0's input (an element of
	// prep's output, linked there).
	require.Equal(t, 3, countOccurrences(tasks, "Shown: the first"))
	require.Equal(t, 2, countOccurrences(tasks, "Open the whole document"))

	// The links serve the whole documents.
	r := e.get("/runs/" + id + "/json?part=step&step=prep")
	require.Equal(t, http.StatusOK, r.Status)
	var arr []string
	require.NoError(t, json.Unmarshal([]byte(r.Body), &arr))
	require.Len(t, arr, 2)
	require.Len(t, arr[0], 100_000+len("<b>end</b>"))
	r = e.get("/runs/" + id + "/json?part=task&step=each&task=0")
	require.Equal(t, http.StatusOK, r.Status)
	var s string
	require.NoError(t, json.Unmarshal([]byte(r.Body), &s))
	require.True(t, strings.HasSuffix(s, "<b>end</b>"))
	r = e.get("/runs/" + id + "/json?part=task&step=each&task=1")
	require.Equal(t, `"tiny"`, r.Body)

	require.Equal(t, http.StatusNotFound, e.get("/runs/"+id+"/json?part=task&step=each&task=9").Status)
	require.Equal(t, http.StatusBadRequest, e.get("/runs/"+id+"/json?part=bogus").Status)
	require.Equal(t, http.StatusBadRequest, e.get("/runs/"+id+"/json?part=task&step=each").Status)
}

func TestRunAPIIdentifiersAreStrings(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{"x": 1}`)
	claim(t, e.db.Pool, "diamond") // a claimed task has a worker id and a message id

	r := e.get("/api/runs/" + id)
	require.Equal(t, http.StatusOK, r.Status)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.Body), &doc))
	run := doc["run"].(map[string]any)
	require.Equal(t, id, run["run_id"])
	steps := doc["steps"].([]any)
	require.Len(t, steps, 4)
	tasks := doc["tasks"].([]any)
	require.Len(t, tasks, 1)
	task := tasks[0].(map[string]any)
	require.IsType(t, "", task["message_id"])
	require.Regexp(t, `^[0-9]+$`, task["message_id"])
	require.Equal(t, testWorkerID, task["last_worker_id"])
	require.Equal(t, "diamond", task["queue_name"])
	require.Equal(t, "started", task["status"])

	r = e.get("/api/runs/00000000-0000-4000-8000-000000000000")
	require.Equal(t, http.StatusNotFound, r.Status)
	require.Equal(t, "application/json", r.Header.Get("Content-Type"))
}

func TestWorkersPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	const (
		alive   = "aaaaaaaa-0000-4000-8000-000000000001"
		stopped = "bbbbbbbb-0000-4000-8000-000000000002"
		silent  = "cccccccc-0000-4000-8000-000000000003"
		ancient = "dddddddd-0000-4000-8000-000000000004"
	)
	e.exec(`select pgflow.register_worker($1::uuid, 'diamond', 'fn_alive')`, alive)
	e.exec(`select pgflow.register_worker($1::uuid, 'diamond', 'fn_stopped')`, stopped)
	e.exec(`select pgflow.mark_worker_stopped($1::uuid)`, stopped)
	e.exec(`select pgflow.register_worker($1::uuid, 'other_queue', 'fn_silent')`, silent)
	e.exec(`update pgflow.workers set last_heartbeat_at = now() - interval '5 minutes' where worker_id = $1::uuid`, silent)
	e.exec(`select pgflow.register_worker($1::uuid, 'diamond', 'fn_ancient')`, ancient)
	e.exec(`update pgflow.workers set last_heartbeat_at = now() - interval '3 days', started_at = now() - interval '4 days'
	        where worker_id = $1::uuid`, ancient)

	body := e.ok("/workers")
	row := tableRow(t, body, `data-worker="`+alive+`"`)
	require.Contains(t, row, `data-status="alive"`)
	require.Contains(t, row, `<a href="/flows/diamond">diamond</a>`)
	require.Contains(t, row, "fn_alive")
	require.Contains(t, tableRow(t, body, `data-worker="`+stopped+`"`), `data-status="stopped"`)
	row = tableRow(t, body, `data-worker="`+silent+`"`)
	require.Contains(t, row, `data-status="unresponsive"`)
	require.Contains(t, row, "<code>other_queue</code>")
	require.NotContains(t, body, ancient, "workers silent for more than a day are left out by default")

	body = e.ok("/workers?all=1")
	require.Contains(t, tableRow(t, body, `data-worker="`+ancient+`"`), `data-status="unresponsive"`)
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch} {
		req, err := http.NewRequestWithContext(context.Background(), m, e.srv.URL+"/flows", nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, m)
	}
	r := e.get("/static/app.js")
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, "EventSource")
	r = e.get("/static/style.css")
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Header.Get("Content-Type"), "text/css")
}

// Nothing waits silently: the page of a started run says when no alive worker serves a queue it waits on, and
// when one of its tasks waits for stalled-task recovery.
func TestRunPageSaysWhatTheRunWaitsOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{}`)
	body := e.ok("/runs/" + id)
	require.Contains(t, body, `No alive worker serves queue &#34;diamond&#34; (1 queued, 0 started task(s)); no worker ever registered for it.`)

	const live = "0b0b0b0b-0000-4000-8000-0000000000a1"
	e.exec(`select pgflow.register_worker($1::uuid, 'diamond', 'dashboard-test')`, live)
	require.NotContains(t, e.ok("/runs/"+id), "No alive worker serves queue", "a live worker serves it now")

	claimed := claim(t, e.db.Pool, "diamond")
	require.Len(t, claimed, 1)
	e.exec(`update pgflow.step_tasks set started_at = now() - interval '1 hour', queued_at = now() - interval '2 hours'
		where run_id = $1 and status = 'started'`, id)
	require.Contains(t, e.ok("/runs/"+id), `Task 0 of step &#34;a&#34; (attempt 1) is past its`)
	require.Contains(t, e.ok("/runs/"+id), `it waits for stalled-task recovery.`)

	completeTask(t, e.db.Pool, claimed[0], `1`)
	e.exec(`update pgflow.runs set status = 'failed', failed_at = now() where run_id = $1`, id)
	require.NotContains(t, e.ok("/runs/"+id), "run-waiting", "a finished run waits on nothing")
}

// A flow with per-step queues shows each step's queue and its depth, and no missing default queue.
func TestFlowPagesShowPerStepQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	e.exec(`select pgflow.create_flow('routed', queue_mode => 'step')`)
	e.exec(`select pgflow.add_step('routed', 'first')`)
	e.exec(`select pgflow.add_step('routed', 'second')`)
	e.exec(`select pgflow.add_step('routed', 'after', array['first'])`)
	startRun(t, e.db.Pool, "routed", `{}`)
	startRun(t, e.db.Pool, "routed", `{}`)
	startRun(t, e.db.Pool, "routed", `{}`)

	row := tableRow(t, e.ok("/flows"), `data-flow="routed"`)
	require.Regexp(t, `<span class="queue-length">3</span> queued, 3 visible(, oldest \d+s)? in <code>routed__first</code>`, row)
	require.Regexp(t, `<span class="queue-length">3</span> queued, 3 visible(, oldest \d+s)? in <code>routed__second</code>`, row)
	require.Contains(t, row, `<span class="queue-length">0</span> queued, 0 visible in <code>routed__after</code>`)
	require.NotContains(t, row, "no queue")

	body := e.ok("/flows/routed")
	require.Contains(t, body, `<code>routed__second</code><div class="muted"><span class="queue-length">3</span> queued, 3 visible</div>`)
	require.Contains(t, body, `<code>routed__after</code><div class="muted"><span class="queue-length">0</span> queued, 0 visible</div>`)
}
