package dashboard_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

func TestCheckListenAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"127.0.0.1:8080", "localhost:0", "[::1]:9000", "127.8.9.10:80"} {
		require.NoError(t, dashboard.CheckListenAddr(addr, ""), addr)
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:8080", "192.168.1.5:80", "example.com:80"} {
		err := dashboard.CheckListenAddr(addr, "")
		require.Error(t, err, addr)
		require.ErrorContains(t, err, addr)
		require.ErrorContains(t, err, "without a token")
		require.NoError(t, dashboard.CheckListenAddr(addr, "s3cret"), addr)
	}
	require.ErrorContains(t, dashboard.CheckListenAddr("no-port", "x"), `"no-port"`)
}

func TestTokenAuth(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := newEnv(t, dashboard.Config{Token: token})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{}`)

	// Without the token: nothing, not even static files or the event stream.
	for _, path := range []string{"/flows", "/runs/" + id, "/api/runs/" + id, "/events", "/static/app.js", "/"} {
		r := e.get(path)
		require.Equal(t, http.StatusUnauthorized, r.Status, path)
		require.NotContains(t, r.Body, "diamond")
		require.Contains(t, r.Header.Get("WWW-Authenticate"), "Bearer")
	}
	bearer := func(v string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("Authorization", v) }
	}
	require.Equal(t, http.StatusUnauthorized, e.get("/flows", bearer("Bearer wrong")).Status)
	require.Equal(t, http.StatusUnauthorized, e.get("/flows", bearer("Basic "+token)).Status)
	require.Equal(t, http.StatusUnauthorized, e.get("/flows", bearer("Bearer "+token+"x")).Status)
	require.Equal(t, http.StatusUnauthorized, e.get("/flows?token=wrong").Status)

	// A bearer token works on every request.
	r := e.get("/flows", bearer("Bearer "+token))
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, `href="/flows/diamond"`)
	require.Equal(t, http.StatusOK, e.get("/api/runs/"+id, bearer("bearer "+token)).Status)

	// ?token= once: a cookie and a redirect to the same address without the token.
	r = e.get("/runs?flow=diamond&token=" + token)
	require.Equal(t, http.StatusSeeOther, r.Status)
	require.Equal(t, "/runs?flow=diamond", r.Header.Get("Location"))
	cookies := (&http.Response{Header: r.Header}).Cookies()
	require.Len(t, cookies, 1)
	c := cookies[0]
	require.Equal(t, dashboard.CookieName, c.Name)
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.NotContains(t, c.Value, token, "the cookie does not carry the token itself")
	withCookie := func(r *http.Request) { r.AddCookie(c) }
	r = e.get("/runs?flow=diamond", withCookie)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, r.Body, id)
	require.Equal(t, http.StatusOK, e.get("/static/app.js", withCookie).Status)

	// A forged cookie does not pass.
	forged := func(r *http.Request) {
		r.AddCookie(&http.Cookie{Name: dashboard.CookieName, Value: strings.Repeat("0", 64)})
	}
	require.Equal(t, http.StatusUnauthorized, e.get("/flows", forged).Status)
	// Neither does the token itself as a cookie.
	raw := func(r *http.Request) { r.AddCookie(&http.Cookie{Name: dashboard.CookieName, Value: token}) }
	require.Equal(t, http.StatusUnauthorized, e.get("/flows", raw).Status)

	// Pages tell browsers not to send the address (which may hold ?token=) anywhere.
	require.Equal(t, "no-referrer", e.get("/flows", withCookie).Header.Get("Referrer-Policy"))
}

func TestNoTokenConfiguredAllowsAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	require.Equal(t, http.StatusOK, e.get("/flows").Status)
	// A ?token= is just ignored.
	require.Equal(t, http.StatusOK, e.get("/flows?token=whatever").Status)
}
