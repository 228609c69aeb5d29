package verifier_test

import (
	"fmt"

	"github.com/kplug/kplug/httpsig/verifier"
)

func ExampleLoadConfig() {
	cfg, err := verifier.LoadConfig("testdata/authentication-config.yaml", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.AuthenticatorNames(), cfg.Policy.RequiredHeaders, cfg.Policy.MaxAge, cfg.Policy.MaxClockSkew)
	// Output: [workload-certificates] map[X-K8s-Audience:[https://my-apiserver.example.com]] 1m0s 5s
}
