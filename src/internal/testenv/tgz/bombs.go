package tgz

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
)

// The generators below write hostile archives as streams, for the tests
// and benchmarks of the archive limits: none is ever held in memory.

// TinyFiles writes a .tgz of n one-byte files.
func TinyFiles(w io.Writer, n int) error {
	zw, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for i := range n {
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("p/f%06d", i), Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte{'x'}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// Zeros writes a .tgz holding one file of size zero bytes.
func Zeros(w io.Writer, size int64) error { return ZeroFiles(w, 1, size) }

// ZeroFiles writes a .tgz of files files of size zero bytes each. The zeros
// are one small gzip member, compressed once and repeated (gzip readers
// concatenate members), so writing gigabytes costs megabytes.
func ZeroFiles(w io.Writer, files int, size int64) error {
	const chunk = 1 << 20
	member := func(b []byte) ([]byte, error) {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return nil, err
		}
		if _, err := zw.Write(b); err != nil {
			return nil, err
		}
		err = zw.Close()
		return buf.Bytes(), err
	}
	zeros, err := member(make([]byte, chunk))
	if err != nil {
		return err
	}
	for i := range files {
		var hdr bytes.Buffer
		tw := tar.NewWriter(&hdr)
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("p/zeros%d", i), Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		head, err := member(hdr.Bytes()) // the header alone: no Close, no padding
		if err != nil {
			return err
		}
		if _, err := w.Write(head); err != nil {
			return err
		}
		for left := size; left > 0; left -= chunk {
			m := zeros
			if left < chunk {
				if m, err = member(make([]byte, left)); err != nil {
					return err
				}
			}
			if _, err := w.Write(m); err != nil {
				return err
			}
		}
		if pad := (512 - size%512) % 512; pad > 0 {
			m, err := member(make([]byte, pad))
			if err != nil {
				return err
			}
			if _, err := w.Write(m); err != nil {
				return err
			}
		}
	}
	end, err := member(make([]byte, 1024)) // two zero blocks end a tar
	if err != nil {
		return err
	}
	_, err = w.Write(end)
	return err
}
