package plugin_test

import (
	"fmt"
	"os"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
)

// A plugin answers in the version the client asked for.
func Example() {
	info, err := plugin.LoadInfo(`{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}`)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := plugin.Write(os.Stdout, info, &execcred.Status{Token: "my-token"}); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{},"status":{"token":"my-token"}}
}
