package wire_test

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/kplug/kplug/execcred/wire"
)

// One exchange, both sides: the client encodes what it tells the plugin, the plugin reads
// it from KUBERNETES_EXEC_INFO and prints its answer, and the client decodes the answer and
// checks it as client-go does.
func Example() {
	// The client: a v1 exec block with provideClusterInfo, and an exec proxy lock.
	info := &wire.Info{
		APIVersion:   wire.V1,
		Cluster:      &wire.Cluster{Server: "https://k.example:6443"},
		LockFilePath: "/run/user/1000/kplug/client-1.lock",
	}
	env, err := info.Encode()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s=%s", wire.InfoEnv, env)

	// The plugin: it answers in the version it was asked for, for the cluster it was told.
	stdout, err := plugin(string(env))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("plugin stdout: %s\n", stdout)

	// The client again.
	status, err := wire.Decode(info.APIVersion, stdout)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("token:", status.Token, "expires:", status.ExpirationTimestamp.UTC())
	// Output:
	// KUBERNETES_EXEC_INFO={"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"cluster":{"server":"https://k.example:6443","config":null},"interactive":false,"lockFilePath":"/run/user/1000/kplug/client-1.lock"}}
	// plugin stdout: {"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{},"status":{"expirationTimestamp":"2030-01-02T03:04:05Z","token":"token-for-https://k.example:6443"}}
	// token: token-for-https://k.example:6443 expires: 2030-01-02 03:04:05 +0000 UTC
}

// plugin is what an exec plugin does with the package: read its input, print its answer.
func plugin(execInfo string) ([]byte, error) {
	in, err := wire.LoadInfo(execInfo)
	if err != nil {
		return nil, err
	}
	expiry := wire.NewTime(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	return json.Marshal(wire.ExecCredential{
		Kind: wire.Kind, APIVersion: in.APIVersion, Spec: struct{}{},
		Status: &wire.Status{Token: "token-for-" + in.Cluster.Server, ExpirationTimestamp: &expiry},
	})
}

// Decode refuses what client-go refuses, in client-go's words and order.
func ExampleDecode() {
	for _, stdout := range []string{
		``,
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"t"}}`,
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{}}`,
		`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"clientCertificateData":"-----BEGIN CERTIFICATE-----"}}`,
		// YAML, and fields this package does not know, are accepted as by client-go.
		"apiVersion: client.authentication.k8s.io/v1\nstatus:\n  token: t\n  newField: 1\n",
	} {
		s, err := wire.Decode(wire.V1, []byte(stdout))
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		fmt.Println("token:", s.Token, "unknown fields:", s.Unknown)
	}
	// Output:
	// error: plugin wrote nothing to stdout; it must print an ExecCredential with apiVersion client.authentication.k8s.io/v1
	// error: exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin returned version client.authentication.k8s.io/v1beta1
	// error: exec plugin didn't return a token or cert/key pair
	// error: exec plugin returned only certificate or key, not both
	// token: t unknown fields: [newField]
}
