package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// jsonCmd pretty-prints the JSON document on stdin, or the value at PATH in
// it: the demo's stand-in for jq, which a fresh machine may lack.
func jsonCmd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 1 || (len(args) == 1 && strings.HasPrefix(args[0], "-")) {
		fmt.Fprintf(stderr, "simcluster json: takes at most one PATH, like ready-status.Pending or apps.0.name\n%s\n", usage)
		return 2
	}
	data, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster json: read: %v\n", err)
		return 1
	}
	path := ""
	if len(args) == 1 {
		path = args[0]
	}
	out, err := jsonQuery(data, path)
	if err != nil {
		fmt.Fprintf(stderr, "simcluster json: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, out)
	return 0
}

// jsonQuery returns the value at path (keys and array indexes joined by
// dots; "" is the whole document): strings bare, everything else as indented
// JSON in the document's own key order, so that a shell can compare `true`
// or `3` directly and a person reads the fields as the API wrote them.
func jsonQuery(data []byte, path string) (string, error) {
	raw := json.RawMessage(bytes.TrimSpace(data))
	if !json.Valid(raw) {
		return "", fmt.Errorf("the input is not one JSON document")
	}
	if path != "" {
		steps := strings.Split(path, ".")
		for i, step := range steps {
			at := strings.Join(steps[:i+1], ".")
			var obj map[string]json.RawMessage
			var arr []json.RawMessage
			switch {
			case json.Unmarshal(raw, &obj) == nil && obj != nil:
				next, ok := obj[step]
				if !ok {
					return "", fmt.Errorf("no field %s", at)
				}
				raw = next
			case json.Unmarshal(raw, &arr) == nil && arr != nil:
				n, err := strconv.Atoi(step)
				if err != nil || n < 0 || n >= len(arr) {
					return "", fmt.Errorf("no element %s (the array has %d)", at, len(arr))
				}
				raw = arr[n]
			default:
				return "", fmt.Errorf("no field %s: the value before it is not an object or array", at)
			}
		}
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return "", fmt.Errorf("indent: %w", err)
	}
	return out.String(), nil
}
