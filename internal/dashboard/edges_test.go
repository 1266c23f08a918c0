package dashboard_test

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgflow-go/pgflow/internal/dashboard"
)

// withHost sends the request with the given Host header, as a page under another name (DNS rebinding) does.
func withHost(host string) func(*http.Request) {
	return func(r *http.Request) { r.Host = host }
}

// Without a token, only loopback names and the allowed hosts are served: a page on evil.example whose DNS
// name now points at 127.0.0.1 must not read the runs' inputs.
func TestHostHeaderWithoutToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{AllowedHosts: []string{"Dash.Internal", "10.1.2.3:8080"}})
	defineDiamond(t, e.db.Pool, "diamond")
	id := startRun(t, e.db.Pool, "diamond", `{"secret": "card 4242"}`)

	for _, host := range []string{
		"localhost", "localhost:8080", "LOCALHOST", "localhost.", "127.0.0.1", "127.0.0.1:1234", "127.9.9.9:80",
		"[::1]", "[::1]:8080", "app.localhost", "app.localhost:3000",
		"dash.internal", "dash.internal:9999", "DASH.INTERNAL.", "10.1.2.3", "10.1.2.3:80",
	} {
		r := e.get("/runs/"+id, withHost(host))
		require.Equal(t, http.StatusOK, r.Status, "Host %q: %s", host, r.Body)
		require.Contains(t, r.Body, "card 4242", host)
	}
	for _, host := range []string{
		"evil.example", "evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example",
		"localhostx", "dash.internal.evil.example", "internal", "10.1.2.4", "[::2]:80", "0.0.0.0", "[::]",
		"localhost:80x",
	} {
		for _, path := range []string{"/runs/" + id, "/api/runs/" + id, "/runs/" + id + "/json?part=input",
			"/static/app.js", "/events", "/"} {
			r := e.get(path, withHost(host))
			require.Equal(t, http.StatusForbidden, r.Status, "Host %q, %s: %s", host, path, r.Body)
			require.NotContains(t, r.Body, "4242", host)
			require.Contains(t, r.Body, `refused host "`+host+`"`)
			require.Contains(t, r.Body, "--allowed-host")
		}
	}

	// With a token any host is served to a request that carries it (the token is the protection).
	tok := newEnv(t, dashboard.Config{Token: "s3cret"})
	r := tok.get("/flows", withHost("dash.example.com"), func(r *http.Request) {
		r.Header.Set("Authorization", "Bearer s3cret")
	})
	require.Equal(t, http.StatusOK, r.Status, r.Body)
	require.Equal(t, http.StatusUnauthorized, tok.get("/flows", withHost("dash.example.com")).Status)
}

func TestAllowedHostsAreChecked(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"http://dash.internal/", "dash internal", "*.example.com", "user@host", ""} {
		_, err := dashboard.NormalizeAllowedHosts([]string{"ok.example", bad})
		require.Error(t, err, bad)
		require.ErrorContains(t, err, `"`+bad+`"`)
	}
	got, err := dashboard.NormalizeAllowedHosts([]string{"Dash.Internal.", "[fd00::1]:80", "10.0.0.5:8080"})
	require.NoError(t, err)
	require.Equal(t, []string{"dash.internal", "fd00::1", "10.0.0.5"}, got)
	require.True(t, dashboard.IsLoopbackHost("[::1]:80"))
	require.False(t, dashboard.IsLoopbackHost("evil.example"))
}

// rawGet sends a request line exactly as given (a client library would clean or escape the target) and
// returns the response with its body read.
func rawGet(t *testing.T, srvURL, target string, header ...string) *http.Response {
	t.Helper()
	u, err := url.Parse(srvURL)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, 30*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	req := "GET " + target + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: close\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	_, err = conn.Write([]byte(req + "\r\n"))
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err, target)
	defer res.Body.Close()
	return res
}

// requireOnSite checks that a redirect's Location is a path on the dashboard's own site, as a browser reads it:
// browsers treat "\" like "/" and drop tabs and newlines, so "/\evil.example" means "//evil.example".
func requireOnSite(t *testing.T, srvURL, target, loc string) {
	t.Helper()
	require.NotEmpty(t, loc, target)
	require.True(t, strings.HasPrefix(loc, "/"), "GET %s: Location %q", target, loc)
	browser := strings.NewReplacer("\\", "/", "\t", "", "\n", "", "\r", "").Replace(loc)
	require.False(t, strings.HasPrefix(browser, "//"), "GET %s: Location %q leaves the site", target, loc)
	base, err := url.Parse(srvURL + "/some/page")
	require.NoError(t, err)
	ref, err := url.Parse(browser)
	require.NoError(t, err, loc)
	require.Equal(t, base.Host, base.ResolveReference(ref).Host, "GET %s: Location %q", target, loc)
}

func TestRedirectsStayOnSite(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	e := newEnv(t, dashboard.Config{Token: token})
	for _, target := range []string{
		"//evil.example/?token=" + token,
		"//evil.example/runs?flow=x&token=" + token,
		"///evil.example/?token=" + token,
		`/\evil.example/?token=` + token,
		`/\/evil.example/?token=` + token,
		`/%5Cevil.example/?token=` + token,
		`/%2F%2Fevil.example/?token=` + token,
		`/%09/evil.example/?token=` + token,
		"/runs?flow=diamond&token=" + token,
	} {
		res := rawGet(t, e.srv.URL, target)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, target)
		requireOnSite(t, e.srv.URL, target, res.Header.Get("Location"))
		require.NotContains(t, res.Header.Get("Location"), token)
		require.Len(t, res.Cookies(), 1, target)
	}
	// The token is still dropped from an ordinary address, which keeps its query.
	res := rawGet(t, e.srv.URL, "/runs?flow=diamond&token="+token)
	require.Equal(t, "/runs?flow=diamond", res.Header.Get("Location"))
	res = rawGet(t, e.srv.URL, "//evil.example/?token="+token)
	require.Equal(t, "/evil.example/", res.Header.Get("Location"))

	// The router's own redirects (cleaned paths, "/" to "/flows") stay on the site too.
	open := newEnv(t, dashboard.Config{})
	for _, target := range []string{"//evil.example/", "//evil.example/flows", "/./evil.example", "/", "//", "/flows/../runs"} {
		res := rawGet(t, open.srv.URL, target)
		if res.StatusCode >= 300 && res.StatusCode < 400 {
			requireOnSite(t, open.srv.URL, target, res.Header.Get("Location"))
		}
	}
}

// Numeric query parameters out of range are a 400 naming the value, not a 500 from the database.
func TestNumericQueryParametersOutOfRange(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dashboard.Config{})
	defineFan(t, e.db.Pool, "fan")
	id := startRun(t, e.db.Pool, "fan", `{}`)
	for path, want := range map[string]string{
		"/runs?page=999999999":               "page 999999999 with limit 50",
		"/runs?page=4294967297":              "4294967297",
		"/runs?page=99999999999999999999999": "99999999999999999999999",
		"/runs?page=-1":                      "-1",
		"/runs?page=1.5":                     "1.5",
		"/runs?limit=501":                    "501",
		"/runs?limit=0":                      "limit must be a whole number from 1 to 500",
		"/runs?page=2&page=3":                "page is given more than once",
		"/runs?page=5000000&limit=500":       "page 5000000 with limit 500",
		"/runs/" + id + "/json?part=task&step=each&task=99999999999": "99999999999",
		"/runs/" + id + "/json?part=task&step=each&task=-1":          "-1",
		"/runs/" + id + "/json?part=task&step=each&task=x":           "x",
	} {
		r := e.get(path)
		require.Equal(t, http.StatusBadRequest, r.Status, "GET %s: %s", path, r.Body)
		require.Contains(t, r.Body, want, path)
	}
	// The last page the database can reach is still served (empty).
	require.Equal(t, http.StatusOK, e.get("/runs?page=2147483647&limit=1").Status)
}
