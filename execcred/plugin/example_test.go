package plugin_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/kplug/kplug/execcred"
	"github.com/kplug/kplug/execcred/plugin"
	"github.com/kplug/kplug/execcred/wire"
)

// login stands for the expensive part of a plugin: a browser login, a call to a cloud.
func login(_ context.Context, info *plugin.Info) (*execcred.Status, error) {
	expiry := wire.NewTime(time.Now().Add(time.Hour))
	return &execcred.Status{Token: "token-for-" + info.APIVersion, ExpirationTimestamp: &expiry}, nil
}

// A complete plugin: its main function. Kubeconfigs name the binary in an exec block.
func Example_main() {
	dir, err := plugin.DefaultCacheDir("my-plugin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cache := &plugin.Cache{Dir: dir}
	plugin.Main(cache.Wrap("prod", login)) // reads KUBERNETES_EXEC_INFO, answers on stdout
}

// One run of a plugin, as a client would start it, with a cache: a second run within the
// credential's lifetime answers from the cache without logging in.
func ExampleRun() {
	dir, err := os.MkdirTemp("", "plugin-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	logins := 0
	counted := func(ctx context.Context, info *plugin.Info) (*execcred.Status, error) {
		logins++
		return login(ctx, info)
	}
	cache := &plugin.Cache{Dir: dir}
	info := `{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}`
	for range 2 {
		var out bytes.Buffer
		if err := plugin.Run(context.Background(), cache.Wrap("prod", counted), info, &out); err != nil {
			fmt.Println(err)
			return
		}
		cred, err := execcred.DecodeOutput(execcred.V1, out.Bytes()) // what the client does
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(cred.Token)
	}
	fmt.Println("logins:", logins)
	// Output:
	// token-for-client.authentication.k8s.io/v1
	// token-for-client.authentication.k8s.io/v1
	// logins: 1
}

// A plugin function used in-process, as the source of execcred's pipeline
// (execcred.FuncSource).
func Example_inProcess() {
	logins := 0
	counted := func(ctx context.Context, info *plugin.Info) (*execcred.Status, error) {
		logins++
		return login(ctx, info)
	}
	src := execcred.WithCache(execcred.FuncSource(counted, plugin.Info{}), execcred.CacheOptions{})
	for range 3 {
		cred, err := src.Credential(context.Background(), nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(cred.Token)
	}
	fmt.Println("logins:", logins)
	// Output:
	// token-for-client.authentication.k8s.io/v1
	// token-for-client.authentication.k8s.io/v1
	// token-for-client.authentication.k8s.io/v1
	// logins: 1
}

// A plugin that cannot log in says why: Run prints the reason on stdout as a
// metav1.Status, which kplug shows in its error (and client-go too, from the release
// that has the ExecPluginStatusError gate); Main would also print it on stderr, for older
// clients, and exit 1.
func ExampleStatusError() {
	noSession := func(context.Context, *plugin.Info) (*execcred.Status, error) {
		return nil, &plugin.StatusError{Message: "no SSO session for prod; run: my-login prod", Reason: "Unauthorized", Code: 401}
	}
	var out bytes.Buffer
	err := plugin.Run(context.Background(), noSession, "", &out)
	fmt.Println("error:", err)
	fmt.Print(out.String())
	// Output:
	// error: no SSO session for prod; run: my-login prod
	// {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"no SSO session for prod; run: my-login prod","reason":"Unauthorized","code":401}
}
