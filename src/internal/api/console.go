package api

import (
	"net/http"

	"github.com/gorilla/mux"
)

// consoleRoutes serves the web console: its page at / and its files at
// /console/{file}. Both are open (see isOpenPath); the page's API calls
// carry the bearer token.
func (s *server) consoleRoutes(r *mux.Router) {
	if s.opts.Console == nil {
		return
	}
	r.Handle("/", s.opts.Console).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/console/{file}", s.opts.Console).Methods(http.MethodGet, http.MethodHead)
}
