// Package archive inspects the gzip-compressed tar archives API callers
// upload (Helm charts, profiles, resource bundle definitions) as a stream,
// with limits on every dimension an attacker could inflate: compressed size,
// total and per-file uncompressed size, number of entries, path depth and
// compression ratio. It refuses absolute paths, ".." components, links,
// devices and every other entry that is neither a regular file nor a
// directory, so nothing in an archive can name a place outside it.
//
// Inspection never holds more than a small, fixed buffer of its own: a file's
// content is only kept when the caller asks for it (Read, or a visit
// function), and then only up to the per-file limit. A limit is found as
// soon as it is crossed, so a bomb is refused after a few kilobytes of work.
// Errors are errdefs kinds: ErrTooLarge for a limit (413), ErrInvalid for
// anything malformed or unsafe (400).
//
//	files, err := archive.Read(bytes.NewReader(tgz), archive.Limits{}, nil)
//	// files["Chart.yaml"], files["templates/deployment.yaml"], ...
package archive
