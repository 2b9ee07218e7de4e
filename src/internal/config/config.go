package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// EnvPrefix prefixes every environment variable a flag can be set from.
const EnvPrefix = "ARGUS_"

// ConfigFlag is the flag (and ARGUS_CONFIG variable) naming the YAML config file.
const ConfigFlag = "config"

// Sources says where values not given on the command line come from.
type Sources struct {
	// Getenv looks up environment variables; nil means no environment.
	Getenv func(string) string
	// ReadFile reads the config file; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
}

// EnvName is the environment variable that sets flag name.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Parse parses args into fs, then fills the flags the command line left unset
// from the environment, then from the config file named by --config (or
// ARGUS_CONFIG) if fs defines that flag. Unknown config-file keys are errors,
// so a typo never silently falls back to a default.
func Parse(fs *flag.FlagSet, args []string, src Sources) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	getenv := src.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	readFile := src.ReadFile
	if readFile == nil {
		readFile = os.ReadFile
	}

	fromCLI := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { fromCLI[f.Name] = true })

	fromEnv := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := lookup(getenv, EnvName(f.Name)); ok && !fromCLI[f.Name] {
			fromEnv[f.Name] = v
		}
	})

	var fileValues map[string]string
	if cf := fs.Lookup(ConfigFlag); cf != nil {
		path := cf.Value.String()
		if !fromCLI[ConfigFlag] {
			if v, ok := fromEnv[ConfigFlag]; ok {
				path = v
			}
		}
		if path != "" {
			var err error
			if fileValues, err = readConfigFile(fs, readFile, path); err != nil {
				return err
			}
		}
	}

	// Lowest precedence first, so later sets win.
	for _, layer := range []struct {
		name   string
		values map[string]string
	}{{"config file", fileValues}, {"environment", fromEnv}} {
		for _, name := range sortedKeys(layer.values) {
			if fromCLI[name] {
				continue
			}
			if err := fs.Set(name, layer.values[name]); err != nil {
				src := layer.name
				if layer.name == "environment" {
					src = EnvName(name)
				}
				return fmt.Errorf("invalid value %q for %s (%s): %w", layer.values[name], name, src, err)
			}
		}
	}
	return nil
}

func lookup(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

func readConfigFile(fs *flag.FlagSet, readFile func(string) ([]byte, error), path string) (map[string]string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parse config file %s: %w", path, err)
	}
	out := make(map[string]string, len(raw))
	var unknown []string
	for k, v := range raw {
		if fs.Lookup(k) == nil || k == ConfigFlag {
			unknown = append(unknown, k)
			continue
		}
		out[k] = render(v)
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("config file %s: unknown keys: %s", path, strings.Join(unknown, ", "))
	}
	return out, nil
}

// render turns a YAML scalar or list into the string form flag.Value.Set takes.
func render(v any) string {
	switch t := v.(type) {
	case nil:
		return ""
	case []any:
		parts := make([]string, len(t))
		for i, e := range t {
			parts[i] = render(e)
		}
		return strings.Join(parts, ",")
	case float64:
		// YAML numbers arrive as float64; print integers without an exponent.
		if t == float64(int64(t)) {
			return fmt.Sprintf("%d", int64(t))
		}
		return fmt.Sprint(t)
	default:
		return fmt.Sprint(t)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// StringList is a flag.Value holding a comma-separated list.
type StringList []string

func (l *StringList) String() string { return strings.Join(*l, ",") }

// Set replaces the list; empty elements are dropped.
func (l *StringList) Set(v string) error {
	*l = nil
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// OneOf is a flag.Value that accepts only the listed strings.
type OneOf struct {
	Value   *string
	Allowed []string
}

func (o OneOf) String() string {
	if o.Value == nil {
		return ""
	}
	return *o.Value
}

// Set accepts v only when it is one of Allowed.
func (o OneOf) Set(v string) error {
	for _, a := range o.Allowed {
		if v == a {
			*o.Value = v
			return nil
		}
	}
	return errors.New("must be one of " + strings.Join(o.Allowed, ", "))
}

// Reference renders the flags as a Markdown table: flag, environment variable,
// default, meaning. docs/operations.md embeds it, so the documented defaults
// are the code's defaults.
func Reference(fs *flag.FlagSet) string {
	var b strings.Builder
	b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := f.DefValue
		if def == "" {
			def = "(empty)"
		}
		fmt.Fprintf(&b, "| `--%s` | `%s` | `%s` | %s |\n", f.Name, EnvName(f.Name), def, f.Usage)
	})
	return b.String()
}

// Size is a flag.Value holding a byte count, written as a Kubernetes
// quantity: "512Mi", "15Mi", "1G" or a plain number of bytes.
type Size struct {
	Value *int64
}

func (s Size) String() string {
	if s.Value == nil {
		return ""
	}
	return resource.NewQuantity(*s.Value, resource.BinarySI).String()
}

// Set accepts a non-negative quantity of whole bytes.
func (s Size) Set(v string) error {
	q, err := resource.ParseQuantity(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("not a size (e.g. 512Mi, 15Mi, 1G, 4096): %w", err)
	}
	n, ok := q.AsInt64()
	if !ok || n < 0 {
		return fmt.Errorf("%s is not a whole, non-negative number of bytes", v)
	}
	*s.Value = n
	return nil
}
