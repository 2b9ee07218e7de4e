package cli

import (
	"bytes"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// printRaw prints an API answer as it came (json) or as YAML.
func printRaw(w io.Writer, raw []byte, output string) error {
	if output == "yaml" {
		y, err := yaml.JSONToYAML(raw)
		if err != nil {
			return fmt.Errorf("convert to YAML: %w", err)
		}
		_, err = w.Write(y)
		return err
	}
	raw = bytes.TrimRight(raw, "\n")
	_, err := fmt.Fprintf(w, "%s\n", raw)
	return err
}
