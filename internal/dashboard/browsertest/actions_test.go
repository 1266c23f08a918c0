package browsertest

import (
	"context"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow"
	"github.com/pgflow-go/pgflow/internal/dashboard"
	"github.com/pgflow-go/pgflow/internal/pgtest"
)

// TestBrowserCancelAndRetry logs in with the token, clicks Cancel on a started run, confirms with a reason, and
// sees the run page show it cancelled with its steps not run; then Retry resumes it, and "Retry as new run"
// leads to a new run linked to it. Every change goes through the real forms (POST with the CSRF token).
func TestBrowserCancelAndRetry(t *testing.T) {
	t.Parallel()
	const token = "browser-action-token"
	db := pgtest.New(t)
	client, err := pgflow.NewClient(db.Pool, nil)
	require.NoError(t, err)
	t.Cleanup(client.Close)
	e := newEnvOn(t, db, dashboard.Config{Token: token, Actions: client})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{}`)

	// The run page of a started run is live: its parts are re-rendered as the run changes, so the test finds
	// each element when it clicks it (a node found earlier may have been replaced).
	ctx := newBrowser(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/runs/"+id+"?token="+token)))
	clickWhenThere(t, ctx, "action-cancel")
	waitJS(t, ctx, `!!document.querySelector('input[name="reason"]')`, "the confirmation page")
	evalJS[bool](t, ctx, `(document.querySelector('input[name="reason"]').value = "clicked in a browser", true)`)
	clickWhenThere(t, ctx, "confirm-action")
	waitJS(t, ctx, `!!document.getElementById("run-error")`, "the run's error")
	waitJS(t, ctx, `document.getElementById("run-status").textContent === "cancelled"`, "the run to show cancelled")
	require.Contains(t, evalJS[string](t, ctx, `document.getElementById("run-error").textContent`), "The run was cancelled: clicked in a browser.")
	require.Contains(t, evalJS[string](t, ctx, `document.getElementById("step-d").textContent`), "not run (run cancelled)")
	require.Equal(t, "cancelled", runStatus(t, e.db.Pool, id))

	// Retry: confirm, and the run is started again (its root step gets a fresh task).
	clickWhenThere(t, ctx, "action-retry")
	clickWhenThere(t, ctx, "confirm-action")
	// (The "done" note may already be gone: the live page re-renders as the resumed run moves on.)
	waitJS(t, ctx, `document.getElementById("run-status").textContent === "started"`, "the resumed run")
	require.Equal(t, "started", runStatus(t, e.db.Pool, id))
	runToEnd(t, e.db.Pool, "diamond", func(claimed) string { return `true` })
	waitJS(t, ctx, `document.getElementById("run-status").textContent === "completed"`, "the resumed run to complete")
}

// clickWhenThere waits until the element with id exists and clicks it, looking it up at the moment of the click.
func clickWhenThere(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	waitJS(t, ctx, `!!document.getElementById("`+id+`")`, "#"+id)
	evalJS[bool](t, ctx, `(document.getElementById("`+id+`").click(), true)`)
}
