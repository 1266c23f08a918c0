package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

// EnvScreenshot, when set to a file path, makes TestBrowserRunPageGoesLive save a screenshot of the run page in
// the middle of the run there (used by hand to refresh docs/dashboard-run.png; CI leaves it unset).
const EnvScreenshot = "PGFLOW_DASHBOARD_SCREENSHOT"

// findChromium returns the Chromium binary or fails the test: the browser tests are part of the suite.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("Chromium is not installed, and the dashboard's browser tests need it: " +
		"install it with `apt-get install -y chromium chromium-driver` (Debian), or run `make test` as root, " +
		"whose set-up (.ci/setup) installs it")
	return ""
}

// newBrowser starts a fresh headless Chromium and returns a tab context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(findChromium(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "profile")),
		chromedp.WindowSize(1400, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	// Start the browser now, so a broken installation fails here with its own error.
	require.NoError(t, chromedp.Do(ctx), "start headless Chromium")
	return ctx
}

// waitJS polls a JavaScript boolean expression in the page until it is true, up to a generous deadline.
func waitJS(t *testing.T, ctx context.Context, expr, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		last, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && last {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	state, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("live") ? document.getElementById("live").innerText.slice(0, 2000) : document.body.innerText.slice(0, 2000)`))
	t.Fatalf("timed out waiting for %s (%s); page shows:\n%s", what, expr, state)
}

// evalJS evaluates a JavaScript expression in the page and decodes its value.
func evalJS[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// TestBrowserRunPageGoesLive opens a run page in real headless Chromium, drives the run to completion from the
// test, and waits for the page to show each change and finally "completed", without a reload. It goes through
// the token login, so the event stream must work with the session cookie.
func TestBrowserRunPageGoesLive(t *testing.T) {
	t.Parallel()
	const token = "browser-test-token"
	e := newEnv(t, dashboard.Config{Token: token})
	defineFan(t, e.db.Pool, "orders")
	e.exec(`select pgflow.add_step('orders', 'notify', array['prep'])`)
	id := startRun(t, e.db.Pool, "orders", `{"order": 42, "note": "<script>window.pwned = 1</script>"}`)

	ctx := newBrowser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/runs/"+id+"?token="+token),
		chromedp.WaitVisible(chromedp.CSS(`#run-status`)),
	))
	nodes := evalJS[int](t, ctx, `document.querySelectorAll("svg.dag g.node").length`)
	require.Equal(t, 4, nodes, "one DAG node per step")
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.Equal(t, e.srv.URL+"/runs/"+id, url, "the token is dropped from the address")

	// Mark this document; a reload would lose the mark.
	require.True(t, evalJS[bool](t, ctx, `window.__sameDocument = "yes"; true`))
	waitJS(t, ctx, `document.documentElement.getAttribute("data-live") === "connected"`, "the event stream to open")
	waitJS(t, ctx, `document.getElementById("run-status").textContent === "started"`, "the started run")

	// prep completes: its node turns completed and the map and notify start.
	for _, c := range claim(t, e.db.Pool, "orders") {
		completeTask(t, e.db.Pool, c, `["apple", "pear", "plum"]`)
	}
	waitJS(t, ctx, `document.querySelector('svg.dag g.node[data-step="prep"]').getAttribute("data-status") === "completed"`,
		"prep to show completed")
	waitJS(t, ctx, `document.querySelector('svg.dag g.node[data-step="each"]').getAttribute("data-status") === "started"`,
		"each to show started")

	// Mid-run: one map task completes, one fails (and will be retried), one and notify keep running. The page
	// shows the error without a reload.
	cs := claim(t, e.db.Pool, "orders")
	require.Len(t, cs, 4)
	var rest []claimed
	for _, c := range cs {
		switch {
		case c.StepSlug == "each" && c.TaskIndex == 0:
			completeTask(t, e.db.Pool, c, `{"item": "apple", "ok": true}`)
		case c.StepSlug == "each" && c.TaskIndex == 1:
			failTask(t, e.db.Pool, c, "inventory service timed out after 30s")
		default:
			rest = append(rest, c)
		}
	}
	// A failed attempt emits no event (docs/events.md); the next event of the run brings the page up to date.
	completeTask(t, e.db.Pool, rest[1], `{"sent": true}`) // notify
	require.Equal(t, "notify", rest[1].StepSlug)
	waitJS(t, ctx, `document.getElementById("step-each").textContent.includes("inventory service timed out")`,
		"the failed attempt's error")
	waitJS(t, ctx, `document.querySelector('svg.dag g.node[data-step="notify"]').getAttribute("data-status") === "completed"`,
		"notify to show completed")
	if path := os.Getenv(EnvScreenshot); path != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, png, 0o644))
		t.Logf("screenshot saved to %s", path)
	}

	// The rest of the run: the retry becomes visible at once instead of after its backoff.
	completeTask(t, e.db.Pool, rest[0], `{"item": "plum", "ok": true}`)
	e.exec(`update pgmq.q_orders set vt = now()`)
	runToEnd(t, e.db.Pool, "orders", func(c claimed) string {
		switch c.StepSlug {
		case "each":
			return fmt.Sprintf(`{"item": %s, "ok": true}`, c.Input)
		default:
			return `{"items": 3}`
		}
	})
	require.Equal(t, "completed", runStatus(t, e.db.Pool, id))
	waitJS(t, ctx, `document.getElementById("run-status").textContent === "completed"`, "the run to show completed")

	same := evalJS[string](t, ctx, `window.__sameDocument || "reloaded"`)
	completedNodes := evalJS[int](t, ctx, `document.querySelectorAll('svg.dag g.node[data-status="completed"]').length`)
	allNodes := evalJS[int](t, ctx, `document.querySelectorAll("svg.dag g.node").length`)
	pwned := evalJS[bool](t, ctx, `window.pwned === 1`)
	require.Equal(t, "yes", same, "the page updated without a reload")
	require.Equal(t, 4, allNodes)
	require.Equal(t, 4, completedNodes)
	require.False(t, pwned, "markup in the input is shown as text, never run")
	// Read in the page, not through a node handle: the live region may be replaced between a lookup and a read.
	waitJS(t, ctx, `[...document.querySelectorAll("#live pre.json")].some(p => p.textContent.includes("<script>window.pwned = 1</script>"))`,
		"the input's markup to show as text")

}

// TestBrowserRunListGoesLive opens the run list and starts runs from the test: they appear without a reload.
func TestBrowserRunListGoesLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineDiamond(t, e.db.Pool, "diamond")
	first := startRun(t, e.db.Pool, "diamond", `{}`)

	ctx := newBrowser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(e.srv.URL+"/runs?flow=diamond"),
		chromedp.WaitVisible(chromedp.CSS(`#runs-summary`)),
	))
	require.True(t, evalJS[bool](t, ctx, `window.__sameDocument = "yes"; true`))
	waitJS(t, ctx, `document.documentElement.getAttribute("data-live") === "connected"`, "the event stream to open")
	waitJS(t, ctx, fmt.Sprintf(`!!document.querySelector('tr[data-run="%s"]')`, first), "the first run")

	second := startRun(t, e.db.Pool, "diamond", `{}`)
	waitJS(t, ctx, fmt.Sprintf(`!!document.querySelector('tr[data-run="%s"][data-status="started"]')`, second), "the new run to appear")
	runToEnd(t, e.db.Pool, "diamond", func(claimed) string { return `true` })
	waitJS(t, ctx, fmt.Sprintf(`!!document.querySelector('tr[data-run="%s"][data-status="completed"]')`, first), "the first run to complete")
	waitJS(t, ctx, fmt.Sprintf(`!!document.querySelector('tr[data-run="%s"][data-status="completed"]')`, second), "the second run to complete")
	require.Equal(t, "yes", evalJS[string](t, ctx, `window.__sameDocument || "reloaded"`))
}
