package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// sitePath turns an escaped URL path into one that a browser can only read as a path on this site: it starts
// with exactly one "/", never "//" or "/\" (which browsers treat as "//", the start of another host), and any
// backslash or control character is percent-encoded (browsers drop tabs and newlines inside URLs, so "/\t/x"
// would otherwise become "//x").
func sitePath(escapedPath string) string {
	var b strings.Builder
	for i := 0; i < len(escapedPath); i++ {
		c := escapedPath[i]
		if c == '\\' || c < 0x20 || c == 0x7f {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return "/" + strings.TrimLeft(b.String(), "/")
}

// safeLocation returns loc when it is a path on this site, and otherwise the path and query of loc made into
// one with sitePath: a redirect of the dashboard never leaves it.
func safeLocation(loc string) string {
	u, err := url.Parse(loc)
	if err != nil {
		return "/"
	}
	if u.Scheme == "" && u.Host == "" && u.Opaque == "" && u.User == nil && strings.HasPrefix(loc, "/") &&
		sitePath(loc) == loc {
		return loc
	}
	out := sitePath(u.EscapedPath())
	if u.RawQuery != "" {
		out += "?" + u.RawQuery
	}
	return out
}

// redirect answers 303 See Other to path (an escaped path) with the raw query, always on this site.
func redirect(w http.ResponseWriter, r *http.Request, escapedPath, rawQuery string) {
	loc := sitePath(escapedPath)
	if rawQuery != "" {
		loc += "?" + rawQuery
	}
	http.Redirect(w, r, safeLocation(loc), http.StatusSeeOther)
}

// sameSiteRedirects makes every redirect the handler sends (including those of http.ServeMux, which redirects
// to cleaned paths and added trailing slashes) point to a path on this site.
func sameSiteRedirects(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(&redirectGuard{ResponseWriter: w}, r)
	})
}

type redirectGuard struct {
	http.ResponseWriter
	wrote bool
}

func (g *redirectGuard) WriteHeader(status int) {
	if !g.wrote && status >= 300 && status < 400 {
		if loc := g.Header().Get("Location"); loc != "" {
			g.Header().Set("Location", safeLocation(loc))
		}
	}
	g.wrote = true
	g.ResponseWriter.WriteHeader(status)
}

func (g *redirectGuard) Write(b []byte) (int, error) {
	g.wrote = true
	return g.ResponseWriter.Write(b)
}

// Flush keeps event streams working through the guard.
func (g *redirectGuard) Flush() {
	g.wrote = true
	if f, ok := g.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (g *redirectGuard) Unwrap() http.ResponseWriter { return g.ResponseWriter }
