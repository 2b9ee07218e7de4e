package api

import (
	"context"
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
// 401 and the API's shape stays private. A read-only token passes for GET
// and HEAD and is refused anything else with 403.
func (s *server) authenticate(next http.Handler) http.Handler {
	if s.opts.Tokens == nil && s.opts.ReadTokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if isOpenPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, found := bearerToken(r.Header.Get("Authorization"))
		if found && s.opts.Tokens != nil && s.opts.Tokens.Valid(token) {
			next.ServeHTTP(w, r)
			return
		}
		if found && s.opts.ReadTokens != nil && s.opts.ReadTokens.Valid(token) {
			if r.Method == http.MethodGet || r.Method == http.MethodHead {
				next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyReadOnly, true)))
				return
			}
			s.nameRoute(r)
			writeError(w, r, errdefs.Forbidden("this token may only read (GET and HEAD); %s needs a token of --auth-token-file", r.Method))
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

// Access is GET /v2/access: what the caller's credentials allow, so a
// client (the console) offers only the actions it may take.
type Access struct {
	// Auth is "token" when the API needs a bearer token, "none" when it is
	// open.
	Auth string `json:"auth"`
	// Write is true when the caller may change things (POST, PUT, DELETE).
	Write bool `json:"write"`
}

// accessRoute serves GET /v2/access.
func (s *server) accessRoute(r *mux.Router) {
	r.HandleFunc("/v2/access", s.handle(func(s *server, w http.ResponseWriter, r *http.Request) error {
		a := Access{Auth: "none", Write: true}
		if s.opts.Tokens != nil || s.opts.ReadTokens != nil {
			a.Auth = "token"
		}
		if ro, _ := r.Context().Value(keyReadOnly).(bool); ro {
			a.Write = false
		}
		writeJSON(w, http.StatusOK, a)
		return nil
	})).Methods(http.MethodGet)
}

// needsWrite refuses a read-only token a GET whose answer is itself a
// credential to change things (a cluster's kubeconfig): reading it is
// writing by another road.
func needsWrite(r *http.Request, what string) error {
	if ro, _ := r.Context().Value(keyReadOnly).(bool); ro {
		return errdefs.Forbidden("%s needs a token of --auth-token-file; this token may only read", what)
	}
	return nil
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
