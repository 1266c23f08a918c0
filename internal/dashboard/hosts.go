package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// AllowedHostFlag is the command-line flag that adds a host name to Config.AllowedHosts; error messages name it.
const AllowedHostFlag = "--allowed-host"

// hostName returns the host name of a Host header without its port and brackets, in lower case and without a
// trailing dot. ok is false when the header is not a host name with an optional port.
func hostName(hostport string) (string, bool) {
	h := hostport
	if host, port, err := net.SplitHostPort(hostport); err == nil {
		if port == "" || strings.Trim(port, "0123456789") != "" {
			return "", false
		}
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "" || strings.ContainsAny(h, "/\\@ \t\r\n[]") {
		return "", false
	}
	return h, true
}

// IsLoopbackHost reports whether a Host header (with or without a port) names the local machine by a name no
// DNS answer can redirect: localhost, a name under .localhost, or a loopback IP address.
func IsLoopbackHost(hostport string) bool {
	h, ok := hostName(hostport)
	if !ok {
		return false
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// NormalizeAllowedHosts checks the host names of Config.AllowedHosts (or --allowed-host) and returns them
// without ports, in lower case. An entry must be a bare host name or IP address, optionally with a port.
func NormalizeAllowedHosts(hosts []string) ([]string, error) {
	out := make([]string, 0, len(hosts))
	for _, raw := range hosts {
		h, ok := hostName(strings.TrimSpace(raw))
		if !ok || strings.Contains(h, "*") {
			return nil, fmt.Errorf("dashboard: allowed host %q is not a host name (give e.g. dash.internal or 10.0.0.5)", raw)
		}
		out = append(out, h)
	}
	return out, nil
}

// RequireKnownHost protects a server that has no token against DNS rebinding: a page on another site whose
// name the attacker points at 127.0.0.1 would otherwise read every response. It lets a request through only
// when its Host header names the loopback interface (IsLoopbackHost) or one of allowed, which must have been
// normalized with NormalizeAllowedHosts. Other requests get 403 with a body naming the host and the flag that
// allows it.
func RequireKnownHost(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsLoopbackHost(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		if h, ok := hostName(r.Host); ok {
			for _, a := range allowed {
				if h == a {
					next.ServeHTTP(w, r)
					return
				}
			}
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusForbidden)
		if r.Host == "" {
			fmt.Fprintf(w, "pgflow: refused a request without a Host header. Without a token only requests to "+
				"localhost, 127.0.0.1 or [::1] are served.\n")
			return
		}
		shown, _ := hostName(r.Host)
		if shown == "" {
			shown = r.Host
		}
		fmt.Fprintf(w, "pgflow: refused host %q. Without a token only requests to localhost, 127.0.0.1 or [::1] "+
			"are served (this protects against DNS rebinding). To serve this name too, start the server with "+
			"%s %s, or set a token (--auth-token).\n", r.Host, AllowedHostFlag, shown)
	})
}
