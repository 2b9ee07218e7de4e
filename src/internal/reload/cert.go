package reload

import (
	"crypto/tls"
	"fmt"
	"time"

	"github.com/sirupsen/logrus"
)

// CertificateOptions names a PEM certificate (chain) and its key.
type CertificateOptions struct {
	CertFile, KeyFile string
	// Interval as in Options; 0 means DefaultInterval.
	Interval time.Duration
	Logger   *logrus.Entry
	Now      func() time.Time
}

// Certificate is a TLS certificate that follows its files, so a rotation
// (by cert-manager, say) needs no restart. Cert and key are read together;
// a pair caught half-rotated does not match, is not loaded, and is tried
// again at the next look.
type Certificate struct {
	file *File[*tls.Certificate]
}

// NewCertificate loads the pair; it fails when the files are missing or do
// not make a valid pair.
func NewCertificate(opts CertificateOptions) (*Certificate, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, fmt.Errorf("reload: a certificate needs both a cert file and a key file")
	}
	f, err := New(Options[*tls.Certificate]{
		Paths:    []string{opts.CertFile, opts.KeyFile},
		Interval: opts.Interval,
		Logger:   opts.Logger,
		Now:      opts.Now,
		Parse: func(c [][]byte) (*tls.Certificate, error) {
			cert, err := tls.X509KeyPair(c[0], c[1])
			if err != nil {
				return nil, fmt.Errorf("parse TLS certificate and key: %w", err)
			}
			return &cert, nil
		},
	})
	if err != nil {
		return nil, err
	}
	return &Certificate{file: f}, nil
}

// GetCertificate is for tls.Config.GetCertificate.
func (c *Certificate) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.file.Get(), nil
}

// ServerConfig is a TLS server configuration serving c: TLS 1.2 or later.
func (c *Certificate) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: c.GetCertificate,
	}
}
