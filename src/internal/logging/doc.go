// Package logging builds the structured logrus logger both binaries use, and
// bridges libraries that log through log/slog (FerretDB) into it.
package logging
