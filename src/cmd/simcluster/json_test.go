package main

import (
	"strings"
	"testing"
)

func TestJSONQuery(t *testing.T) {
	doc := `{"name":"dig","ready":false,"ready-status":{"Ready":20,"Pending":2},
	  "state":{"Actions":[{"State":"Instantiated","ContextId":"18446744073709551615"}]},"apps":[]}`
	for name, c := range map[string]struct {
		path, want, err string
	}{
		"whole document keeps key order": {"", "{\n  \"name\": \"dig\",\n  \"ready\": false,\n  \"ready-status\": {\n    \"Ready\": 20,\n    \"Pending\": 2\n  },", ""},
		"bool":                           {"ready", "false", ""},
		"string is bare":                 {"name", "dig", ""},
		"nested number":                  {"ready-status.Pending", "2", ""},
		"array index, big id exact":      {"state.Actions.0.ContextId", "18446744073709551615", ""},
		"object":                         {"ready-status", "{\n  \"Ready\": 20,\n  \"Pending\": 2\n}", ""},
		"missing field":                  {"ready-status.Failed", "", "no field ready-status.Failed"},
		"index out of range":             {"apps.0", "", "no element apps.0 (the array has 0)"},
		"into a scalar":                  {"name.x", "", "not an object or array"},
	} {
		got, err := jsonQuery([]byte(doc), c.path)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", name, err, c.err)
			}
			continue
		}
		if err != nil || !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %q, %v; want %q", name, got, err, c.want)
		}
	}
	if _, err := jsonQuery([]byte("{} {}"), ""); err == nil {
		t.Error("two documents: no error")
	}
}
