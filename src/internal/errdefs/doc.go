// Package errdefs defines the domain error kinds every Argus package returns
// (not found, conflict, invalid, ...). Packages wrap them with context; the API
// layer maps a kind to an HTTP status in exactly one place (api.statusFor), so
// no caller ever inspects an error's text to decide what it means.
//
//	if err := cat.Delete(ctx, key); errors.Is(err, errdefs.ErrConflict) { ... }
package errdefs
