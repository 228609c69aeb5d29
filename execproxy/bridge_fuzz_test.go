package execproxy

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"testing"
)

// FuzzBridgeAdmit feeds arbitrary bytes to the bridge as a client's first request: the
// bridge must never panic, and must open a tunnel only for a CONNECT that carries its
// credentials.
func FuzzBridgeAdmit(f *testing.F) {
	creds := base64.StdEncoding.EncodeToString([]byte(bridgeUser + ":0123456789abcdef"))
	b := &Bridge{basic: []byte(creds)}
	for _, seed := range []string{
		"CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\nProxy-Authorization: Basic " + creds + "\r\n\r\n",
		"CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\nProxy-Authorization: basic  " + creds + " \r\n\r\n",
		"CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\nProxy-Authorization: Basic a3BsdWc6\r\n\r\n",
		"CONNECT k:443 HTTP/1.1\r\nHost: k:443\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: k\r\nProxy-Authorization: Basic " + creds + "\r\n\r\n",
		"CONNECT k:443 HTTP/1.0\r\nProxy-Authorization: Basic\r\n\r\n",
		"\x16\x03\x01\x00\x05hello",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		refusal := b.admit(bufio.NewReader(bytes.NewReader(data)))
		if refusal == "" && !bytes.Contains(data, []byte(creds)) {
			t.Errorf("admitted a request without the credentials: %q", data)
		}
	})
}
