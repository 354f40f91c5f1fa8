package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlock-go/dlock/dlocktest"
	"github.com/dlock-go/dlock/internal/testserver"
)

// testPKI is a private CA with a server certificate for 127.0.0.1 and a client
// certificate, as PEM files.
type testPKI struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dlock test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	p := testPKI{ca: filepath.Join(dir, "ca.pem")}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	issue := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.serverCert, p.serverKey = issue("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = issue("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// serverConfig is a TLS server configuration that requires client
// certificates issued by the CA; protos are its ALPN protocols.
func (p testPKI) serverConfig(t *testing.T, protos ...string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: protos}
}

// tlsFront accepts TLS connections (client certificates required) and passes
// what they carry to the real server at upstream, for servers the tests start
// without TLS. It returns its address.
func tlsFront(t *testing.T, cfg *tls.Config, upstream string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if conns == nil {
			return false // closed
		}
		conns = append(conns, c)
		return true
	}
	conns = []net.Conn{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		conns = nil
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", upstream)
			if err != nil || !track(c) || !track(up) {
				c.Close()
				if up != nil {
					up.Close()
				}
				continue
			}
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			go pipe(up, c)
			go pipe(c, up)
		}
	}()
	return ln.Addr().String()
}

// TestTLSOnEveryBackend: with --tls-ca, --tls-cert and --tls-key (or their
// variables) dlock locks on a Redis that speaks only TLS and requires client
// certificates, on etcd through https://, and on ZooKeeper; without the client
// certificate or the CA it is refused; redis:// at the TLS port says to use
// rediss://.
func TestTLSOnEveryBackend(t *testing.T) {
	pki := newTestPKI(t)
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	testserver.StartRedis(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
		"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes")
	tlsURL := "rediss://127.0.0.1:" + strconv.Itoa(port) + "/0"
	files := []string{"--tls-ca", pki.ca, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey}
	key := dlocktest.Key(t)
	run := func(args ...string) result {
		t.Helper()
		return dlockRun(t, append([]string{"run"}, append(args, key, "--", "sh", "-c", "echo $DLOCK_TOKEN")...)...)
	}
	ok := func(what string, r result) {
		t.Helper()
		if r.code != 0 || strings.TrimSpace(r.stdout) == "" {
			t.Errorf("%s: exit %d stdout %q stderr %q", what, r.code, r.stdout, r.stderr)
		}
	}
	ok("rediss:// with a CA and a client certificate", run(append([]string{"--redis", tlsURL}, files...)...))
	cmd := dlockCmd(t, "run", "--redis", tlsURL, key, "--", "true")
	cmd.Env = append(cmd.Env, "DLOCK_TLS_CA="+pki.ca, "DLOCK_TLS_CERT="+pki.clientCert, "DLOCK_TLS_KEY="+pki.clientKey)
	if r := runCmd(t, cmd); r.code != 0 {
		t.Errorf("rediss:// with DLOCK_TLS_*: exit %d stderr %q", r.code, r.stderr)
	}
	if r := dlockRun(t, append([]string{"status", "--redis", tlsURL}, append(files, key)...)...); r.code != exitFailure || r.stderr != "" {
		t.Errorf("status over TLS of a free lock: exit %d %q", r.code, r.stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no client certificate", []string{"--redis", tlsURL, "--tls-ca", pki.ca}, exitUnavailable, "cannot reach"},
		{"no CA", []string{"--redis", tlsURL, "--tls-cert", pki.clientCert, "--tls-key", pki.clientKey}, exitUnavailable, "certificate"},
		{"plain URL at the TLS port", []string{"--redis", "redis://127.0.0.1:" + strconv.Itoa(port) + "/0"}, exitUnavailable, "use rediss://"},
		{"TLS files with a plain URL", append([]string{"--redis", redisURL()}, files...), exitUsage, "rediss://"},
		{"certificate without key", []string{"--redis", tlsURL, "--tls-cert", pki.clientCert}, exitUsage, "--tls-key"},
		{"CA file of no certificate", []string{"--redis", tlsURL, "--tls-ca", pki.clientKey}, exitUsage, "no PEM certificate"},
	} {
		r := run(tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d stderr %q, want %d and %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
		checkOneLine(t, r)
	}

	etcd := testserver.StartEtcd(t)
	etcdFront := tlsFront(t, pki.serverConfig(t, "h2"), strings.TrimPrefix(etcd.ClientURL, "http://"))
	ok("etcd https://", run(append([]string{"--etcd", "https://" + etcdFront}, files...)...))
	if r := run("--etcd", "https://"+etcdFront, "--tls-ca", pki.ca); r.code != exitUnavailable {
		t.Errorf("etcd https:// without the client certificate: exit %d %q", r.code, r.stderr)
	}

	zk := testserver.StartZooKeeper(t)
	zkFront := tlsFront(t, pki.serverConfig(t), zk.Addr)
	ok("ZooKeeper over TLS", run(append([]string{"--zk", zkFront}, files...)...))
	if r := run("--zk", zkFront); r.code != exitUnavailable {
		t.Errorf("ZooKeeper TLS port without TLS: exit %d %q", r.code, r.stderr)
	}
}
