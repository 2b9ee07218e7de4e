// Package cli is the argus command: status, watch, wait, history,
// clusters, sync and list of deployment intent groups
// (PROJECT/COMPOSITE-APP/VERSION/DIG) and v1 instances (--instance ID),
// over the API client of package client. Connection settings come from
// flags, then the environment (ARGUS_SERVER, ARGUS_TOKEN, …), then a
// config file; cobra gives it shell completion (argus completion bash),
// deployment names included. docs/cli.md describes every command.
//
//	os.Exit(cli.Run(ctx, cli.Options{Args: os.Args[1:], Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
package cli
