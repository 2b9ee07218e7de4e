// Command ferretdb serves FerretDB v1 (SQLite backend) as a standalone
// MongoDB-wire server for scripts/ha-up.sh, through the embeddable package
// the orchestrator itself embeds: the replicas then share one catalogue
// the way they would share a MongoDB.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/FerretDB/FerretDB/ferretdb"
)

func main() {
	listen := flag.String("listen-addr", "127.0.0.1:27017", "TCP address to serve the MongoDB wire protocol on")
	dir := flag.String("sqlite-dir", "ferretdb", "directory of the SQLite databases")
	flag.Parse()
	if err := run(*listen, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "ferretdb:", err)
		os.Exit(1)
	}
}

func run(listen, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return err
	}
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: listen},
		Handler:   "sqlite",
		SQLiteURL: "file:" + abs + "/",
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Fprintln(os.Stderr, "ferretdb: serving", f.MongoDBURI())
	return f.Run(ctx)
}
