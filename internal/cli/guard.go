package cli

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kplug/kplug/execcred/kuberc"
	"github.com/kplug/kplug/internal/proxyplugin"
	"github.com/kplug/kplug/keys"
)

// httpSigKeyOptions are proxyplugin.KeyOptions for a kubeconfig's httpSignature keyFile, which the
// kubeconfig, not the user, chose: a tpm: URI may not have device= or pin-source=, and
// under a kuberc policy that restricts plugins a PKCS#11 module (module-path= or
// $KPLUG_PKCS11_MODULE) must be given by its absolute path and pass the policy, as
// guardedKeyOptions requires of proxy-plugin (issue 30 review, I3). Errors are a
// configuration error; the caller names the keyFile.
func httpSigKeyOptions(policy kuberc.Policy, uri string) (keys.Options, error) {
	ko := proxyplugin.KeyOptions()
	if err := proxyplugin.RefuseTPMQuery(uri, "the kubeconfig chose it"); err != nil {
		return ko, invalidConfig(err)
	}
	if policy.Type == "" || policy.Type == kuberc.AllowAll || !strings.HasPrefix(strings.ToLower(uri), "pkcs11:") {
		return ko, nil
	}
	u, err := keys.ParsePKCS11URI("pkcs11:" + uri[len("pkcs11:"):])
	if err != nil {
		return ko, invalidConfig(err)
	}
	module, from := u.ModulePath, "module-path"
	if module == "" {
		module, from = ko.PKCS11Module, "$"+proxyplugin.PKCS11ModuleEnv
	}
	if module == "" {
		return ko, nil
	}
	if !filepath.IsAbs(module) {
		return ko, invalidConfig(fmt.Errorf("the PKCS#11 module %q (%s) is not an absolute path: a credential plugin policy restricts which code runs, so give the module's absolute path, and list it in credentialPluginAllowlist", module, from))
	}
	if _, err := policy.Check(module); err != nil {
		return ko, invalidConfig(fmt.Errorf("the PKCS#11 module %s: %w", module, err))
	}
	return ko, nil
}
