package execcred_test

import (
	"fmt"

	"github.com/kplug/kplug/execcred"
)

// The bytes a v1 plugin finds in KUBERNETES_EXEC_INFO, identical to client-go's.
func ExampleExecInfo() {
	info, err := execcred.ExecInfo(execcred.V1, false, &execcred.Cluster{Server: "https://k.example:6443"}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(info))
	// Output:
	// {"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"cluster":{"server":"https://k.example:6443","config":null},"interactive":false}}
}

// Decoding a plugin's answer.
func ExampleDecodeOutput() {
	cred, err := execcred.DecodeOutput(execcred.V1beta1, []byte(`{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"abc","expirationTimestamp":"2030-01-02T03:04:05Z"}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cred.Token, cred.Expiry)
	// Output:
	// abc 2030-01-02 03:04:05 +0000 UTC
}
