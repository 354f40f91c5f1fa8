package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// tlsFiles are the files of --tls-ca, --tls-cert and --tls-key (or
// $DLOCK_TLS_CA, $DLOCK_TLS_CERT, $DLOCK_TLS_KEY): a private CA to trust, and
// a client certificate with its key, for every backend.
type tlsFiles struct {
	ca, cert, key string
}

// tlsVars are the variables read when the flag is not given.
var tlsVars = map[string]string{"tls-ca": "DLOCK_TLS_CA", "tls-cert": "DLOCK_TLS_CERT", "tls-key": "DLOCK_TLS_KEY"}

func (f *tlsFiles) define(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "tls-ca", "", "trust the CA certificates in `FILE` (PEM) for TLS servers, instead of the system's; $DLOCK_TLS_CA")
	fs.StringVar(&f.cert, "tls-cert", "", "present the client certificate in `FILE` (PEM) to TLS servers, with --tls-key; $DLOCK_TLS_CERT")
	fs.StringVar(&f.key, "tls-key", "", "the private key of --tls-cert, in `FILE` (PEM); $DLOCK_TLS_KEY")
}

// fromEnv fills in what the flags left empty from the environment.
func (f *tlsFiles) fromEnv(getenv func(string) string) {
	for _, p := range []struct {
		v    *string
		name string
	}{{&f.ca, "tls-ca"}, {&f.cert, "tls-cert"}, {&f.key, "tls-key"}} {
		if *p.v == "" {
			*p.v = getenv(tlsVars[p.name])
		}
	}
}

// set reports whether any TLS file was given.
func (f *tlsFiles) set() bool { return f != nil && (f.ca != "" || f.cert != "" || f.key != "") }

// apply adds the CA and the client certificate to cfg, and returns cfg (a new
// one when nil).
func (f *tlsFiles) apply(cfg *tls.Config) (*tls.Config, error) {
	if cfg == nil {
		cfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if f == nil {
		return cfg, nil
	}
	if f.ca != "" {
		pem, err := os.ReadFile(f.ca)
		if err != nil {
			return nil, usageErrorf("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErrorf("--tls-ca %s: no PEM certificate in it", f.ca)
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.cert != "" && f.key == "":
		return nil, usageErrorf("--tls-cert without --tls-key: give the certificate's private key too")
	case f.key != "" && f.cert == "":
		return nil, usageErrorf("--tls-key without --tls-cert: give the client certificate too")
	case f.cert != "":
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usageErrorf("--tls-cert %s, --tls-key %s: %v", f.cert, f.key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// plainWithTLSFiles is the error for TLS files given with a server URL that
// does not ask for TLS.
func plainWithTLSFiles(url, want string) error {
	return usageErrorf("--tls-ca, --tls-cert and --tls-key are for TLS: write %s instead of %s", want, maskURL(url))
}

// speaksTLS reports whether err is what a plain-text client gets from a TLS
// port: the server closes the connection on a request that is no handshake.
func speaksTLS(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// tlsDialer returns a dialer of TLS connections with cfg, the server name taken
// from the address when cfg has none, for clients that take a dialer.
func tlsDialer(cfg *tls.Config) func(network, address string, timeout time.Duration) (net.Conn, error) {
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c := cfg.Clone()
		if c.ServerName == "" {
			if host, _, err := net.SplitHostPort(address); err == nil {
				c.ServerName = host
			}
		}
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, network, address, c)
	}
}
