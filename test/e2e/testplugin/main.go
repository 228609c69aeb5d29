// Command testplugin is an exec credential plugin written with kplug's SDK, for the
// end-to-end tests. It answers with the token in $TEST_TOKEN_FILE, or the client
// certificate and key in $TEST_CERT_FILE and $TEST_KEY_FILE, or, when the client asks
// for signing material (KEP-6308 spec.httpSignature), the key and certificate in
// $TEST_SIGN_KEY_FILE and $TEST_SIGN_CERT_FILE with the audience $TEST_SIGN_AUDIENCE;
// and appends a byte to
// $TEST_COUNT_FILE on every run so that tests can count runs. $TEST_SLEEP (a duration)
// makes it as slow as a real login.
package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testplugin:", err)
		os.Exit(1)
	}
}

func run() error {
	info, err := plugin.LoadInfo(os.Getenv(wire.InfoEnv))
	if err != nil {
		return err
	}
	if f := os.Getenv("TEST_COUNT_FILE"); f != "" {
		fh, err := os.OpenFile(f, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		_, err = fh.Write([]byte("x"))
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if d := os.Getenv("TEST_SLEEP"); d != "" {
		sleep, err := time.ParseDuration(d)
		if err != nil {
			return fmt.Errorf("TEST_SLEEP: %w", err)
		}
		time.Sleep(sleep)
	}
	status := &wire.Status{}
	if f := os.Getenv("TEST_TOKEN_FILE"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		status.Token = string(b)
	}
	if f := os.Getenv("TEST_CERT_FILE"); f != "" {
		cert, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		key, err := os.ReadFile(os.Getenv("TEST_KEY_FILE"))
		if err != nil {
			return err
		}
		status.ClientCertificateData, status.ClientKeyData = string(cert), string(key)
	}
	if info.HTTPSignature != nil {
		key, err := os.ReadFile(os.Getenv("TEST_SIGN_KEY_FILE"))
		if err != nil {
			return err
		}
		cert, err := os.ReadFile(os.Getenv("TEST_SIGN_CERT_FILE"))
		if err != nil {
			return err
		}
		headers := map[string]string{}
		for _, h := range info.HTTPSignature.SignedHeaders {
			if strings.EqualFold(h.Name, "X-K8s-Audience") {
				headers[h.Name] = os.Getenv("TEST_SIGN_AUDIENCE")
			}
		}
		status = &wire.Status{
			ExpirationTimestamp: &wire.Time{Time: time.Now().Add(time.Hour)},
			HTTPSignature:       &wire.HTTPSignature{PrivateKey: string(key), Certificate: string(cert), SignedHeaders: headers},
		}
	}
	return plugin.Write(os.Stdout, info, status)
}
