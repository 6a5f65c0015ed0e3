package suanli

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The environment every producer under clients/ reads to reach a secure broker (never flags:
// a command line shows in `ps` and in logs).
const (
	EnvSecurityProtocol = "SUANLI_KAFKA_SECURITY_PROTOCOL" // PLAINTEXT (default) or SASL_SSL
	EnvSASLMechanism    = "SUANLI_KAFKA_SASL_MECHANISM"    // SCRAM-SHA-512 (default) or SCRAM-SHA-256
	EnvUsername         = "SUANLI_KAFKA_USERNAME"          // SCRAM user (SASL_SSL)
	EnvPassword         = "SUANLI_KAFKA_PASSWORD"          // its password (SASL_SSL)
	EnvCA               = "SUANLI_KAFKA_CA"                // PEM file of the CA that signed the broker's certificate (SASL_SSL)
)

// KafkaSecurityFromEnv returns the franz-go options of the SUANLI_KAFKA_* environment:
// none for PLAINTEXT (the default), TLS that trusts only SUANLI_KAFKA_CA plus SASL/SCRAM
// for SASL_SSL. The error names the variable at fault and never contains the password.
func KafkaSecurityFromEnv() ([]kgo.Opt, error) {
	return KafkaSecurity(os.Getenv)
}

// KafkaSecurity is KafkaSecurityFromEnv reading the variables through getenv (an empty
// value counts as unset).
func KafkaSecurity(getenv func(string) string) ([]kgo.Opt, error) {
	protocol := strings.ToUpper(getenv(EnvSecurityProtocol))
	switch protocol {
	case "", "PLAINTEXT":
		return nil, nil
	case "SASL_SSL":
	default:
		return nil, fmt.Errorf("%s %q is not supported: use PLAINTEXT or SASL_SSL", EnvSecurityProtocol, getenv(EnvSecurityProtocol))
	}
	var missing []string
	for _, name := range []string{EnvUsername, EnvPassword, EnvCA} {
		if getenv(name) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) == 1 {
		return nil, fmt.Errorf("%s is SASL_SSL but %s is not set", EnvSecurityProtocol, missing[0])
	} else if len(missing) > 1 {
		return nil, fmt.Errorf("%s is SASL_SSL but %s are not set", EnvSecurityProtocol, strings.Join(missing, ", "))
	}
	auth := scram.Auth{User: getenv(EnvUsername), Pass: getenv(EnvPassword)}
	var mechanism kgo.Opt
	switch m := strings.ToUpper(getenv(EnvSASLMechanism)); m {
	case "", "SCRAM-SHA-512":
		mechanism = kgo.SASL(auth.AsSha512Mechanism())
	case "SCRAM-SHA-256":
		mechanism = kgo.SASL(auth.AsSha256Mechanism())
	default:
		return nil, fmt.Errorf("%s %q is not supported: use SCRAM-SHA-512 or SCRAM-SHA-256", EnvSASLMechanism, getenv(EnvSASLMechanism))
	}
	caFile := getenv(EnvCA)
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the CA file: %w", EnvCA, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it", EnvCA, caFile)
	}
	// franz-go clones this config for every broker and sets ServerName to the broker's host,
	// so the broker's certificate is checked against the address dialled (DNS name or IP).
	tlsConfig := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return []kgo.Opt{kgo.DialTLSConfig(tlsConfig), mechanism}, nil
}
