package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	"github.com/argus-mc/argus/src/internal/client"
)

// DefaultServer is where an orchestrator listens when nothing says
// otherwise (make run, make demo).
const DefaultServer = "http://127.0.0.1:9015"

// maxConfigFile bounds the config file.
const maxConfigFile = 1 << 20

// fileConfig is the config file: the same settings as the flags.
type fileConfig struct {
	Server    string `json:"server"`
	Token     string `json:"token"`
	TokenFile string `json:"token-file"`
	CAFile    string `json:"ca-file"`
	Timeout   string `json:"request-timeout"`
}

// settings are the connection settings, resolved flags > environment >
// config file > defaults.
type settings struct {
	server, token, tokenFile, caFile, config string
	timeout                                  time.Duration
}

// connectionFlags defines the flags every command shares.
func connectionFlags(fs *pflag.FlagSet, s *settings) {
	fs.StringVar(&s.server, "server", "", "orchestrator URL (env ARGUS_SERVER; default "+DefaultServer+")")
	fs.StringVar(&s.token, "token", "", "API bearer token (env ARGUS_TOKEN); prefer --token-file, which stays out of the process list")
	fs.StringVar(&s.tokenFile, "token-file", "", "file holding the API bearer token (env ARGUS_TOKEN_FILE)")
	fs.StringVar(&s.caFile, "ca-file", "", "PEM certificates to trust for an https server (env ARGUS_CA_FILE)")
	fs.StringVar(&s.config, "config", "", "config file (env ARGUS_CONFIG; default $XDG_CONFIG_HOME/argus/config.yaml or ~/.config/argus/config.yaml)")
	fs.DurationVar(&s.timeout, "request-timeout", client.DefaultTimeout, "how long one request may take (streams excepted) (env ARGUS_REQUEST_TIMEOUT)")
}

// resolve fills what no flag set from the environment, then the config
// file, and returns the client's options.
func (s settings) resolve(fs *pflag.FlagSet, getenv func(string) string) (client.Options, error) {
	file, err := readConfig(firstOf(s.config, getenv("ARGUS_CONFIG")), s.config != "" || getenv("ARGUS_CONFIG") != "", getenv)
	if err != nil {
		return client.Options{}, err
	}
	pick := func(flag, flagValue, env, fileValue, def string) string {
		if fs.Changed(flag) {
			return flagValue
		}
		return firstOf(getenv(env), fileValue, def)
	}
	opts := client.Options{
		Server: pick("server", s.server, "ARGUS_SERVER", file.Server, DefaultServer),
		CAFile: pick("ca-file", s.caFile, "ARGUS_CA_FILE", file.CAFile, ""),
	}
	timeout := pick("request-timeout", s.timeout.String(), "ARGUS_REQUEST_TIMEOUT", file.Timeout, client.DefaultTimeout.String())
	if opts.Timeout, err = time.ParseDuration(timeout); err != nil || opts.Timeout <= 0 {
		return client.Options{}, fmt.Errorf("request timeout %q is not a positive duration", timeout)
	}
	// A token given at a level hides a token file of a lower one.
	switch {
	case fs.Changed("token"):
		opts.Token = s.token
	case fs.Changed("token-file"):
		opts.Token, err = readToken(s.tokenFile)
	case getenv("ARGUS_TOKEN") != "":
		opts.Token = getenv("ARGUS_TOKEN")
	case getenv("ARGUS_TOKEN_FILE") != "":
		opts.Token, err = readToken(getenv("ARGUS_TOKEN_FILE"))
	case file.Token != "":
		opts.Token = file.Token
	case file.TokenFile != "":
		opts.Token, err = readToken(file.TokenFile)
	}
	return opts, err
}

// readConfig reads the config file; a missing default file is no error.
func readConfig(path string, named bool, getenv func(string) string) (fileConfig, error) {
	if path == "" {
		dir := getenv("XDG_CONFIG_HOME")
		if dir == "" {
			home := getenv("HOME")
			if home == "" {
				return fileConfig{}, nil
			}
			dir = filepath.Join(home, ".config")
		}
		path = filepath.Join(dir, "argus", "config.yaml")
	}
	data, err := readBounded(path, maxConfigFile)
	if errors.Is(err, fs.ErrNotExist) && !named {
		return fileConfig{}, nil
	}
	if err != nil {
		return fileConfig{}, fmt.Errorf("config file: %w", err)
	}
	var c fileConfig
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return fileConfig{}, fmt.Errorf("config file %s: %w", path, err)
	}
	return c, nil
}

// readToken reads a token file: its first line, trimmed.
func readToken(path string) (string, error) {
	data, err := readBounded(path, 64<<10)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	token, _, _ := strings.Cut(strings.TrimSpace(string(data)), "\n")
	if token = strings.TrimSpace(token); token == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return token, nil
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}

func firstOf(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
