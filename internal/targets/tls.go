package targets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// tlsFiles are the paths of a member's certificate, its key and the CA that
// signed every member's certificate.
type tlsFiles struct{ cert, key, ca string }

// providerOptions are the Galera provider options that put the node's group
// communication and IST on TLS with these files: a peer is accepted only with
// a certificate the CA signed (and the node presents its own).
func (f tlsFiles) providerOptions() []string {
	if f.cert == "" {
		return nil
	}
	return []string{"socket.ssl_cert=" + f.cert, "socket.ssl_key=" + f.key, "socket.ssl_ca=" + f.ca}
}

// writeTLS makes a CA of its own and, for each of names, a certificate it
// signed and the certificate's key, writes them below dir (made 0700; files
// 0600; owned by user where durachk runs as root) and returns each name's
// files. The CA's key is never written: once this returns, no other
// certificate it signed can exist. ECDSA P-256: a key takes microseconds.
func writeTLS(dir, user string, names []string) (map[string]tlsFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := chownTo(dir, user); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	serial := func() (*big.Int, error) { return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) }
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: "durachk run CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	write := func(name, typ string, der []byte) (string, error) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			return "", err
		}
		return p, chownTo(p, user)
	}
	caPath, err := write("ca.pem", "CERTIFICATE", caDER)
	if err != nil {
		return nil, err
	}
	out := map[string]tlsFiles{}
	for _, name := range names {
		if !nodeRE.MatchString(name) {
			return nil, errors.New("tls: bad member name " + name)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		sn, err := serial()
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{SerialNumber: sn, Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		f := tlsFiles{ca: caPath}
		if f.cert, err = write(name+".pem", "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if f.key, err = write(name+".key", "PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
		out[name] = f
	}
	return out, nil
}
