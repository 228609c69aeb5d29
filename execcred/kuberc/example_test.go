package kuberc_test

import (
	"fmt"

	"github.com/kplug/kplug/execcred/kuberc"
)

// A kuberc's policy, as kubectl reads it: credentialPluginAllowlist entries name a command
// (the deprecated name field still works).
func ExampleDecode() {
	pref, err := kuberc.Decode([]byte(`apiVersion: kubectl.config.k8s.io/v1beta1
kind: Preference
credentialPluginPolicy: Allowlist
credentialPluginAllowlist:
- command: kplug
- name: /usr/local/bin/aws-iam-authenticator
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(pref.APIVersion, pref.Policy, pref.Policy.Validate())
	// Output:
	// kubectl.config.k8s.io/v1beta1 Allowlist [kplug /usr/local/bin/aws-iam-authenticator] <nil>
}

// What a client says when the policy denies a plugin, in client-go's words.
func ExamplePolicy_Check() {
	_, err := kuberc.Policy{Type: kuberc.DenyAll}.Check("aws-iam-authenticator")
	fmt.Println(err)
	err = kuberc.Policy{Type: kuberc.Allowlist, Allowlist: []kuberc.AllowlistEntry{}}.Validate()
	fmt.Println(err)
	// Output:
	// plugin "aws-iam-authenticator" not allowed: policy set to "DenyAll"
	// invalid plugin policy: credential plugin policy set to "Allowlist", but allowlist is empty; use "DenyAll" policy instead
}
