package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

const actionToken = "action-test-token"

// newActionEnv is a dashboard with a token and actions through a client on the test database.
func newActionEnv(t *testing.T) *env {
	t.Helper()
	return newEnvFor(t, func(db *pgtest.DB) dashboard.Config {
		client, err := pgflow.NewClient(db.Pool, nil)
		require.NoError(t, err)
		t.Cleanup(client.Close)
		return dashboard.Config{Token: actionToken, Actions: client}
	})
}

func bearer(r *http.Request) { r.Header.Set("Authorization", "Bearer "+actionToken) }

// post sends a form to path with the bearer token.
func (e *env) post(path string, form url.Values, tweak ...func(*http.Request)) response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(e.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for _, f := range tweak {
		f(req)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := client.Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return response{Status: res.StatusCode, Header: res.Header, Body: string(body)}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// confirmCSRF opens the confirmation page of action and returns its CSRF token.
func (e *env) confirmCSRF(id, action string) string {
	e.t.Helper()
	r := e.get("/runs/"+id+"/confirm?action="+action, bearer)
	require.Equal(e.t, http.StatusOK, r.Status, r.Body)
	m := csrfRE.FindStringSubmatch(r.Body)
	require.NotNil(e.t, m, "no CSRF field in the confirmation page:\n%s", r.Body)
	require.Contains(e.t, r.Body, `action="/runs/`+id+`/`+action+`"`)
	return m[1]
}

func TestRunActionsCancelAndRetry(t *testing.T) {
	t.Parallel()
	e := newActionEnv(t)
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{}`)

	// The run page offers Cancel (not Retry) for a started run.
	body := e.get("/runs/"+id, bearer).Body
	require.Contains(t, body, `id="action-cancel" href="/runs/`+id+`/confirm?action=cancel"`)
	require.NotContains(t, body, `id="action-retry"`)
	require.Contains(t, body, "4 steps remaining")

	// Missing, wrong CSRF tokens and another site's Origin are refused with 403 naming the problem; nothing changes.
	csrf := e.confirmCSRF(id, "cancel")
	r := e.post("/runs/"+id+"/cancel", url.Values{}, bearer)
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Contains(t, r.Body, "the CSRF token is missing")
	r = e.post("/runs/"+id+"/cancel", url.Values{"csrf": {"00" + csrf[2:]}}, bearer)
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Contains(t, r.Body, "the CSRF token is wrong")
	r = e.post("/runs/"+id+"/cancel", url.Values{"csrf": {csrf}}, bearer, func(req *http.Request) {
		req.Header.Set("Origin", "https://evil.example")
	})
	require.Equal(t, http.StatusForbidden, r.Status)
	require.Contains(t, r.Body, `Origin "https://evil.example"`)
	// Without the token: 401 before anything else.
	r = e.post("/runs/"+id+"/cancel", url.Values{"csrf": {csrf}})
	require.Equal(t, http.StatusUnauthorized, r.Status)
	require.Equal(t, "started", runStatus(t, e.db.Pool, id))

	// The confirmed cancel goes through the library and leads back to the run page.
	r = e.post("/runs/"+id+"/cancel", url.Values{"csrf": {csrf}, "reason": {"wrong <input>"}}, bearer)
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	require.Equal(t, "/runs/"+id+"?done=cancel", r.Header.Get("Location"))
	require.Equal(t, "cancelled", runStatus(t, e.db.Pool, id))
	body = e.get("/runs/"+id+"?done=cancel", bearer).Body
	require.Contains(t, body, "Cancel run: done.")
	require.Contains(t, body, `id="run-error"`)
	require.Contains(t, body, "The run was cancelled: wrong &lt;input&gt;.")
	require.Contains(t, body, "not run (run cancelled)")
	require.Contains(t, body, `id="action-retry"`)
	require.Contains(t, body, `id="action-retry-fresh"`)
	require.NotContains(t, body, `id="action-cancel"`)

	// Cancelling again: 409 naming the status, and the confirmation page refuses it too.
	r = e.post("/runs/"+id+"/cancel", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusConflict, r.Status)
	require.Contains(t, r.Body, "cancelled")
	require.Equal(t, http.StatusConflict, e.get("/runs/"+id+"/confirm?action=cancel", bearer).Status)

	// Retry as new run: a new run of the flow, linked to this one.
	r = e.post("/runs/"+id+"/retry-fresh", url.Values{"csrf": {e.confirmCSRF(id, "retry-fresh")}}, bearer)
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	loc := r.Header.Get("Location")
	require.Regexp(t, `^/runs/[0-9a-f-]{36}\?done=retry-fresh$`, loc)
	fresh := strings.TrimSuffix(strings.TrimPrefix(loc, "/runs/"), "?done=retry-fresh")
	require.NotEqual(t, id, fresh)
	require.Equal(t, "started", runStatus(t, e.db.Pool, fresh))
	require.Contains(t, e.get("/runs/"+fresh, bearer).Body, `retry of <a href="/runs/`+id+`">`)

	// Retry resumes the run in place.
	r = e.post("/runs/"+id+"/retry", url.Values{"csrf": {e.confirmCSRF(id, "retry")}}, bearer)
	require.Equal(t, http.StatusSeeOther, r.Status, r.Body)
	require.Equal(t, "/runs/"+id+"?done=retry", r.Header.Get("Location"))
	require.Equal(t, "started", runStatus(t, e.db.Pool, id))

	// Unknown actions and runs.
	require.Equal(t, http.StatusBadRequest, e.get("/runs/"+id+"/confirm?action=delete", bearer).Status)
	r = e.post("/runs/0f8fad5b-d9cb-469f-a165-70867728950e/cancel", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusNotFound, r.Status)
	r = e.post("/flows", url.Values{"csrf": {csrf}}, bearer)
	require.Equal(t, http.StatusMethodNotAllowed, r.Status)
}

func TestRunActionsOffWithoutTokenOrClient(t *testing.T) {
	t.Parallel()
	// Actions need a token.
	_, err := dashboard.New(dashboard.Config{Pool: pgtest.New(t).Pool, Actions: &pgflow.Client{}})
	require.ErrorContains(t, err, "Config.Actions needs Config.Token")

	// A token without Actions, and no token at all: read-only, no buttons, POSTs refused.
	for _, cfg := range []dashboard.Config{{Token: actionToken}, {}} {
		e := newEnv(t, cfg)
		defineDiamond(t, e.db.Pool, "diamond")
		id := startRun(t, e.db.Pool, "diamond", `{}`)
		body := e.get("/runs/"+id, bearer).Body
		require.Contains(t, body, `id="run-status"`)
		require.NotContains(t, body, "action-cancel")
		require.Equal(t, http.StatusNotFound, e.get("/runs/"+id+"/confirm?action=cancel", bearer).Status)
		r := e.post("/runs/"+id+"/cancel", url.Values{"csrf": {"x"}}, bearer)
		require.Equal(t, http.StatusMethodNotAllowed, r.Status)
		require.Equal(t, "started", runStatus(t, e.db.Pool, id))
	}
}

func TestRunPageRunControlViews(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineFan(t, e.db.Pool, "fan")
	e.exec(`update pgflow.steps set opt_max_attempts = 2 where flow_slug = 'fan'`)
	id := startRun(t, e.db.Pool, "fan", `{}`)
	for _, c := range claim(t, e.db.Pool, "fan") {
		completeTask(t, e.db.Pool, c, `[1, 2, 3]`)
	}
	cs := claim(t, e.db.Pool, "fan")
	require.Len(t, cs, 3)
	completeTask(t, e.db.Pool, cs[0], `1`)
	failTask(t, e.db.Pool, cs[1], "first try")

	body := e.ok("/runs/" + id)
	require.Contains(t, body, "2 steps remaining")
	require.Contains(t, body, `<text class="counts"`)
	require.Contains(t, body, "1/3 done, 1 running")
	require.Regexp(t, `class="task-bar task-\w+" data-step="each" data-task="2"`, body)
	require.Contains(t, body, `<span class="ago">(just now)</span>`)

	// The retried task fails again: the run fails; its error is at the top and the rest did not run.
	e.exec(`select pgmq.set_vt('fan', msg_id, 0) from pgmq.q_fan`)
	for _, c := range claim(t, e.db.Pool, "fan") {
		if c.TaskIndex == 1 {
			failTask(t, e.db.Pool, c, "second try")
		}
	}
	require.Equal(t, "failed", runStatus(t, e.db.Pool, id))
	body = e.ok("/runs/" + id)
	require.Contains(t, body, `id="run-error"`)
	require.Contains(t, body, "The run failed: step each: second try")
	require.Contains(t, body, "not run (run failed)")
	require.Contains(t, body, "↻1")

	// The run list: the cancelled status filter and the run-id search.
	require.Contains(t, e.ok("/runs"), `<option value="cancelled"`)
	require.Equal(t, http.StatusOK, e.get("/runs?status=cancelled").Status)
	r := e.get("/runs?run=" + strings.ToUpper(id))
	require.Equal(t, http.StatusSeeOther, r.Status)
	require.Equal(t, "/runs/"+id, r.Header.Get("Location"))
	require.Contains(t, e.ok("/runs?run=nope"), `&#34;nope&#34; is not a run id`)
	require.Contains(t, e.ok("/runs?run=0f8fad5b-d9cb-469f-a165-70867728950e"), "there is no run 0f8fad5b-d9cb-469f-a165-70867728950e")
}
