package config

import (
	"flag"
	"io/fs"
	"strings"
	"testing"
)

type settings struct {
	listen    string
	endpoints StringList
	level     string
	workers   int
	config    string
}

func newFlags(s *settings) *flag.FlagSet {
	f := flag.NewFlagSet("t", flag.ContinueOnError)
	f.SetOutput(new(strings.Builder))
	f.StringVar(&s.listen, "listen", ":9015", "listen address")
	f.Var(&s.endpoints, "etcd-endpoints", "etcd endpoints")
	s.level = "info"
	f.Var(OneOf{Value: &s.level, Allowed: []string{"debug", "info", "warn", "error"}}, "log-level", "level")
	f.IntVar(&s.workers, "workers", 4, "workers")
	f.StringVar(&s.config, ConfigFlag, "", "config file")
	return f
}

func TestPrecedence(t *testing.T) {
	files := map[string]string{
		"/c.yaml": "listen: ':1000'\netcd-endpoints: [http://a:2379, http://b:2379]\nworkers: 8\nlog-level: warn\n",
	}
	readFile := func(p string) ([]byte, error) {
		if c, ok := files[p]; ok {
			return []byte(c), nil
		}
		return nil, fs.ErrNotExist
	}
	cases := map[string]struct {
		args    []string
		env     map[string]string
		want    settings
		wantErr string
	}{
		"defaults": {want: settings{listen: ":9015", level: "info", workers: 4}},
		"file only": {
			args: []string{"--config", "/c.yaml"},
			want: settings{listen: ":1000", endpoints: StringList{"http://a:2379", "http://b:2379"}, level: "warn", workers: 8, config: "/c.yaml"},
		},
		"env beats file, flag beats env": {
			args: []string{"--listen", ":3000"},
			env:  map[string]string{"ARGUS_CONFIG": "/c.yaml", "ARGUS_LISTEN": ":2000", "ARGUS_WORKERS": "16"},
			want: settings{listen: ":3000", endpoints: StringList{"http://a:2379", "http://b:2379"}, level: "warn", workers: 16, config: "/c.yaml"},
		},
		"bad env value names the variable": {
			env:     map[string]string{"ARGUS_LOG_LEVEL": "loud"},
			wantErr: "ARGUS_LOG_LEVEL",
		},
		"missing file":   {args: []string{"--config", "/nope.yaml"}, wantErr: "read config file"},
		"stray argument": {args: []string{"serve"}, wantErr: "unexpected arguments"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var s settings
			err := Parse(newFlags(&s), tc.args, Sources{Getenv: func(k string) string { return tc.env[k] }, ReadFile: readFile})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.listen != tc.want.listen || s.level != tc.want.level || s.workers != tc.want.workers ||
				s.endpoints.String() != tc.want.endpoints.String() || s.config != tc.want.config {
				t.Fatalf("got %+v, want %+v", s, tc.want)
			}
		})
	}
}

func TestUnknownFileKeyIsAnError(t *testing.T) {
	var s settings
	err := Parse(newFlags(&s), []string{"--config", "x"}, Sources{ReadFile: func(string) ([]byte, error) {
		return []byte("lissen: ':1'\n"), nil
	}})
	if err == nil || !strings.Contains(err.Error(), "unknown keys: lissen") {
		t.Fatalf("err = %v", err)
	}
}

func TestReferenceListsEveryFlag(t *testing.T) {
	var s settings
	ref := Reference(newFlags(&s))
	for _, want := range []string{"`--listen` | `ARGUS_LISTEN` | `:9015`", "`--etcd-endpoints` | `ARGUS_ETCD_ENDPOINTS` | `(empty)`"} {
		if !strings.Contains(ref, want) {
			t.Errorf("reference lacks %q:\n%s", want, ref)
		}
	}
}

func TestSize(t *testing.T) {
	var n int64 = 15 << 20
	s := Size{Value: &n}
	if s.String() != "15Mi" {
		t.Fatalf("String = %q", s.String())
	}
	for in, want := range map[string]int64{"512Mi": 512 << 20, "1G": 1e9, "4096": 4096, " 2Ki ": 2048} {
		if err := s.Set(in); err != nil || n != want {
			t.Fatalf("Set(%q) = %d, %v; want %d", in, n, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1", "0.5"} {
		if err := s.Set(bad); err == nil {
			t.Fatalf("Set(%q) accepted", bad)
		}
	}
	if (Size{}).String() != "" {
		t.Fatal("zero Size must print empty")
	}
}
