package api

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// TokenChecker says whether a bearer token may use the API.
type TokenChecker interface {
	Valid(token string) bool
}

// Challenge is the WWW-Authenticate value of a 401 (RFC 6750).
const Challenge = `Bearer realm="argus"`

// isOpenPath reports the paths served without a token: kubelet probes carry
// none, and k8splugin's deployments probe /v1/healthcheck. The console's
// page and files (/ and /console/…) hold no data — a browser cannot send a
// bearer token when it loads a page; the page asks for the token and sends
// it with every API call. A pull cluster's agent joins with its join
// token, which authenticates that one call. /metrics is not among them; a
// scraper is configured with the token.
func isOpenPath(path string) bool {
	return path == "/healthz" || path == "/readyz" || path == "/v1/healthcheck" || path == "/" || strings.HasPrefix(path, "/console/") ||
		path == pJoin
}

// authenticate refuses requests without a valid bearer token. It runs before
// routing, so without a token even an unknown path or a wrong method answers
// 401 and the API's shape stays private.
func (s *server) authenticate(next http.Handler) http.Handler {
	if s.opts.Tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpenPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, found := bearerToken(r.Header.Get("Authorization"))
		if found && s.opts.Tokens.Valid(token) {
			next.ServeHTTP(w, r)
			return
		}
		s.nameRoute(r)
		var err error
		if found {
			w.Header().Set("WWW-Authenticate", Challenge+`, error="invalid_token"`)
			err = errdefs.Unauthorized("the bearer token is not valid")
		} else {
			w.Header().Set("WWW-Authenticate", Challenge)
			err = errdefs.Unauthorized("authentication required: send the header \"Authorization: Bearer <token>\"")
		}
		loggerFrom(r.Context()).WithField("token_sent", found).Debug("request not authenticated")
		writeError(w, r, err)
	})
}

// bearerToken takes the token out of an Authorization header; the scheme is
// case-insensitive (RFC 7235).
func bearerToken(header string) (string, bool) {
	scheme, token, _ := strings.Cut(strings.TrimSpace(header), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// nameRoute tells the access log and metrics which route a refused request
// was for, since the router never saw it.
func (s *server) nameRoute(r *http.Request) {
	h, ok := r.Context().Value(keyRoute).(*routeHolder)
	if !ok {
		return
	}
	var match mux.RouteMatch
	if s.router.Match(r, &match) && match.MatchErr == nil && match.Route != nil {
		h.template, _ = match.Route.GetPathTemplate()
	}
}
