// Package reload keeps values that are built from files — API tokens, TLS
// certificates — current when the files change, so rotating a secret needs
// no restart. It runs no goroutine: the value looks at its files when it is
// used, at most once per interval, compares their contents with what it
// loaded, and rebuilds when they differ. A change that cannot be loaded (a
// half-written file, a certificate without its new key yet) is logged and the
// previous value stays in force.
//
//	cert, err := reload.NewCertificate(reload.CertificateOptions{CertFile: crt, KeyFile: key})
//	srv.TLSConfig = cert.ServerConfig()
package reload
