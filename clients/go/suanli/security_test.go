package suanli

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

// writeCA writes a self-signed CA certificate as PEM and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKafkaSecurityPlaintextAddsNothing(t *testing.T) {
	for _, protocol := range []string{"", "PLAINTEXT", "plaintext"} {
		opts, err := KafkaSecurity(env(map[string]string{EnvSecurityProtocol: protocol, EnvPassword: "ignored"}))
		if err != nil || len(opts) != 0 {
			t.Errorf("%q: %d options, %v", protocol, len(opts), err)
		}
	}
}

func TestKafkaSecuritySaslSsl(t *testing.T) {
	ca := writeCA(t)
	for _, mechanism := range []string{"", "SCRAM-SHA-512", "SCRAM-SHA-256"} {
		opts, err := KafkaSecurity(env(map[string]string{EnvSecurityProtocol: "SASL_SSL", EnvSASLMechanism: mechanism,
			EnvUsername: "alice", EnvPassword: "p\"w\\d", EnvCA: ca}))
		if err != nil || len(opts) != 2 {
			t.Errorf("%q: %d options, %v", mechanism, len(opts), err)
		}
	}
}

func TestKafkaSecurityErrorsNameTheVariableAndHideThePassword(t *testing.T) {
	ca := writeCA(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	full := map[string]string{EnvSecurityProtocol: "SASL_SSL", EnvUsername: "alice", EnvPassword: "s3cret-pw", EnvCA: ca}
	with := func(name, value string) map[string]string {
		out := map[string]string{}
		for k, v := range full {
			out[k] = v
		}
		out[name] = value
		return out
	}
	cases := []struct {
		vars map[string]string
		want string
	}{
		{with(EnvCA, ""), "SUANLI_KAFKA_SECURITY_PROTOCOL is SASL_SSL but SUANLI_KAFKA_CA is not set"},
		{with(EnvUsername, ""), "but SUANLI_KAFKA_USERNAME is not set"},
		{with(EnvPassword, ""), "but SUANLI_KAFKA_PASSWORD is not set"},
		{map[string]string{EnvSecurityProtocol: "SASL_SSL", EnvPassword: "s3cret-pw"},
			"but SUANLI_KAFKA_USERNAME, SUANLI_KAFKA_CA are not set"},
		{with(EnvSecurityProtocol, "SSL"), `SUANLI_KAFKA_SECURITY_PROTOCOL "SSL" is not supported`},
		{with(EnvSASLMechanism, "PLAIN"), `SUANLI_KAFKA_SASL_MECHANISM "PLAIN" is not supported`},
		{with(EnvCA, "/nonexistent/ca.pem"), "SUANLI_KAFKA_CA: cannot read the CA file"},
		{with(EnvCA, notPEM), "no PEM certificate"},
	}
	for _, c := range cases {
		_, err := KafkaSecurity(env(c.vars))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("want an error with %q, got %v", c.want, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret-pw") || strings.Contains(err.Error(), "\n") {
			t.Errorf("the error shows the password or spans lines: %v", err)
		}
	}
}
