package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// CookieName is the cookie that carries a browser's proof of the token after it opened a ?token= link.
const CookieName = "pgflow_dashboard"

// CheckListenAddr refuses to serve on a non-loopback address without a token. addr is host:port as given to
// net.Listen; an empty host means every interface. "localhost" and loopback IPs count as loopback.
func CheckListenAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen address %q: %w", addr, err)
	}
	if token != "" || IsLoopback(host) {
		return nil
	}
	shown := host
	if shown == "" {
		shown = "every interface"
	}
	return fmt.Errorf("dashboard: refusing to listen on %q (%s) without a token: "+
		"pass --auth-token or set PGFLOW_DASHBOARD_TOKEN, or listen on 127.0.0.1", addr, shown)
}

// IsLoopback reports whether host names only the local machine.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// cookieValue derives the cookie from the token, so the cookie alone does not reveal the token.
func cookieValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("pgflow dashboard session"))
	return hex.EncodeToString(m.Sum(nil))
}

func equalSecret(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// requireToken lets a request through when no token is configured, or when it carries the token as a bearer
// token or the cookie. A valid ?token= sets the cookie and redirects to the same URL without the token, so the
// token does not stay in the address bar or history.
func (s *Server) requireToken(next http.Handler) http.Handler {
	token := s.cfg.Token
	if token == "" {
		return next
	}
	want := cookieValue(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if auth := r.Header.Get("Authorization"); auth != "" {
			scheme, value, ok := strings.Cut(auth, " ")
			if ok && strings.EqualFold(scheme, "Bearer") && equalSecret(strings.TrimSpace(value), token) {
				next.ServeHTTP(w, r)
				return
			}
		}
		if c, err := r.Cookie(CookieName); err == nil && equalSecret(c.Value, want) {
			next.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if q.Has("token") && equalSecret(q.Get("token"), token) {
			http.SetCookie(w, &http.Cookie{
				Name: CookieName, Value: want, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
				Secure: r.TLS != nil,
			})
			q.Del("token")
			// The same address without the token, as a path on this site: a request for //evil.example/ must
			// not redirect to another site.
			redirect(w, r, r.URL.EscapedPath(), q.Encode())
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="pgflow dashboard"`)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintln(w, "pgflow dashboard: a token is required. Open this page with ?token=<token> once, "+
			"or send Authorization: Bearer <token>.")
	})
}
