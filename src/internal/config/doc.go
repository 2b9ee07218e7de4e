// Package config turns a binary's flags into its settings, filling every flag
// the command line did not set from an ARGUS_* environment variable or from an
// optional YAML config file, in that order of precedence:
//
//	command line > environment > config file > flag default
//
// The flag set is the single source of truth: the environment variable for
// --mongo-uri is ARGUS_MONGO_URI, its config-file key is mongo-uri, and
// Reference renders the documented defaults from the same definitions.
//
//	fs := flag.NewFlagSet("orchestrator", flag.ContinueOnError)
//	fs.StringVar(&opts.Listen, "listen", ":9015", "address the API serves on")
//	err := config.Parse(fs, os.Args[1:], config.Sources{Getenv: os.Getenv})
package config
