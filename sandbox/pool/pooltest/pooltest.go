// Package pooltest runs a real sandbox pool for tests: certificates made
// here (a CA for the pool's certificate, one for its clients), the pool on
// a loopback port over mutual TLS, and clients dialled to it. Test support
// only. Test binaries that use it call reexec.Init in TestMain (the bwrap
// rung re-executes the binary).
package pooltest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"evals.si/image"
	"evals.si/sandbox"
	"evals.si/sandbox/bwrap/bwraptest"
	"evals.si/sandbox/pool"
	"evals.si/sandbox/remote"
)

// CA is a certificate authority made for one test.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA makes a CA named name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return &CA{Cert: c, key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Pool is the CA's certificate as a pool of roots.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue makes a certificate for cn: a server one (for 127.0.0.1 and
// localhost) or a client one. With ca nil it is self-signed.
func Issue(t testing.TB, ca *CA, cn string, server bool) tls.Certificate {
	t.Helper()
	return IssueSerial(t, ca, cn, server, serial(t))
}

// IssueSerial is Issue with the certificate's serial number chosen, as
// two CAs may both choose one.
func IssueSerial(t testing.TB, ca *CA, cn string, server bool, sn *big.Int) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
		tmpl.DNSNames = []string{"localhost"}
	}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca.Cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// WriteFiles writes c as dir/name.crt and dir/name.key and returns their
// paths.
func WriteFiles(t testing.TB, c tls.Certificate, dir, name string) (certFile, keyFile string) {
	t.Helper()
	kb, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Options tune Start.
type Options struct {
	// LeaseTTL (default: the pool's).
	LeaseTTL time.Duration
	// MaxFileBytes (default: the pool's).
	MaxFileBytes int64
	// AllowLocalImages lets clients name oci-layout: images of this
	// machine (the local benchmark image).
	AllowLocalImages bool
	// NoHostRoot refuses sandboxes without an image, as sandboxd does
	// without --allow-host-root; by default the test pool runs them on
	// this machine's root, as the suites' imageless sandboxes expect.
	NoHostRoot bool
	// AllowRegistries are registries on this machine the pool may pull
	// from (pool.Options.AllowRegistries; its store's transport is
	// pool.RegistryTransport of them, as sandboxd's).
	AllowRegistries []string
	// Limits bound the sandboxes' limits (pool.Options.Limits).
	Limits pool.Limits
	// MaxRequests, UploadTimeout (default: the pool's).
	MaxRequests   int
	UploadTimeout time.Duration
	// MoreClientCAs are trusted for client certificates beside ClientCA
	// (a client CA bundle of several CAs).
	MoreClientCAs []*CA
	// Rung, when set, is the pool's rung made from the bwrap one (a test
	// that changes what a rung does, around the real one).
	Rung func(bwrap sandbox.Rung) sandbox.Rung
}

// Running is a pool serving on loopback.
type Running struct {
	Addr     string
	Server   *pool.Server
	ServerCA *CA // signed the pool's certificate
	ClientCA *CA // signs the clients' certificates
}

// Start runs a pool with the bwrap rung (skipping, or failing under
// EVALSI_STRICT, without bubblewrap) until the test ends.
func Start(t testing.TB, o Options) *Running {
	t.Helper()
	var rung sandbox.Rung = bwraptest.Rung(t)
	if o.Rung != nil {
		rung = o.Rung(rung)
	}
	dir := t.TempDir()
	tr, err := pool.RegistryTransport(o.AllowRegistries, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	imgs, err := image.Open(filepath.Join(dir, "images"), slog.Default(), image.WithTransport(tr))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := pool.New(context.Background(), pool.Options{Rung: rung, Images: imgs, StateDir: filepath.Join(dir, "state"), LeaseTTL: o.LeaseTTL,
		MaxFileBytes: o.MaxFileBytes, AllowLocalImages: o.AllowLocalImages, AllowHostRoot: !o.NoHostRoot, AllowRegistries: o.AllowRegistries, Limits: o.Limits, MaxRequests: o.MaxRequests, UploadTimeout: o.UploadTimeout})
	if err != nil {
		t.Fatal(err)
	}
	r := &Running{Server: srv, ServerCA: NewCA(t, "pool-ca"), ClientCA: NewCA(t, "client-ca")}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.Addr = ln.Addr().String()
	clientCAs := r.ClientCA.Pool()
	for _, ca := range o.MoreClientCAs {
		clientCAs.AddCert(ca.Cert)
	}
	// The server sandboxd serves, with its timeouts; refused handshakes
	// are what several tests are about.
	hs := srv.HTTPServer(pool.ServerTLS(Issue(t, r.ServerCA, "pool", true), clientCAs), log.New(io.Discard, "", 0))
	go hs.ServeTLS(ln, "", "")
	t.Cleanup(func() {
		hs.Close()
		if err := srv.Close(context.Background()); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
	})
	return r
}

// ClientTLS is a client configuration with cert, trusting the pool.
func (r *Running) ClientTLS(cert *tls.Certificate) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: r.ServerCA.Pool()}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

// Dial dials the pool as a client named cn (a certificate of the client
// CA), closed when the test ends.
func (r *Running) Dial(t testing.TB, cn string) *remote.Pool {
	t.Helper()
	return r.DialCert(t, Issue(t, r.ClientCA, cn, false))
}

// DialCert dials the pool with the client certificate c, closed when the
// test ends.
func (r *Running) DialCert(t testing.TB, c tls.Certificate) *remote.Pool {
	t.Helper()
	p, err := remote.Dial(context.Background(), remote.Options{Address: r.Addr, TLS: r.ClientTLS(&c)})
	if err != nil {
		t.Fatalf("dialling the pool as %s: %v", c.Leaf.Subject.CommonName, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
