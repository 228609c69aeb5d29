package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/keys"
)

// pluginGuard is the credential plugin policy of the client that runs kplug as its exec
// plugin, over code that kplug's arguments and environment (the exec block's) name
// besides kplug itself: a PKCS#11 module is loaded into kplug, an AWS credential_process
// is run. kubectl checked only `kplug` (issue 27, N1 review). Run by a person, nothing is
// guarded.
func pluginGuard(g *globals) (*execcache.Guard, error) {
	guard, err := execcache.NewGuard(execcache.Process{
		Environ:     os.Environ(),
		Caller:      callerOf(os.Getppid()),
		Log:         g.log,
		AccountHome: execcache.AccountHome(),
	})
	if err != nil {
		var usage *execcache.UsageError
		if errors.As(err, &usage) {
			err = usage.Err
		}
		return nil, invalidConfig(fmt.Errorf("proxy-plugin: %w", err))
	}
	return guard, nil
}

// guardedKeyOptions are keyOptions for the key uri names, once the PKCS#11 module it would
// load (module-path= or $KPLUG_PKCS11_MODULE) has passed the client's policy: under a
// policy that restricts plugins, the module must be given by its absolute path and be on
// the allowlist, like a plugin.
func guardedKeyOptions(guard *execcache.Guard, flag, uri string) (keys.Options, error) {
	ko := keyOptions()
	if guard == nil || !guard.Restricts() || !strings.HasPrefix(strings.ToLower(uri), "pkcs11:") {
		return ko, nil
	}
	u, err := keys.ParsePKCS11URI("pkcs11:" + uri[len("pkcs11:"):])
	if err != nil {
		return ko, invalidConfig(fmt.Errorf("%s: %w", flag, err))
	}
	module, from := u.ModulePath, "module-path"
	if module == "" {
		module, from = ko.PKCS11Module, "$"+pkcs11ModuleEnv
	}
	if module == "" {
		return ko, nil // OpenKey says what is missing
	}
	if !filepath.IsAbs(module) {
		return ko, invalidConfig(fmt.Errorf("%s: the PKCS#11 module %q (%s) is not an absolute path: a credential plugin policy restricts which code runs, so give the module's absolute path, and list it in credentialPluginAllowlist", flag, module, from))
	}
	if _, err := guard.Check("the PKCS#11 module "+module, module); err != nil {
		return ko, invalidConfig(fmt.Errorf("%s: %w", flag, err))
	}
	return ko, nil
}

// guardedAWSFiles are the AWS configuration and credentials files of the user, not of the
// exec block, when a policy restricts plugins: a credential_process in the AWS
// configuration runs a program, and AWS_CONFIG_FILE (or HOME) in the exec block would
// choose it. They are the client's AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE, or
// .aws/config and .aws/credentials in its HOME; with the client unknown, those of the
// account's home. Nil options when nothing restricts plugins.
func guardedAWSFiles(guard *execcache.Guard) ([]func(*awsconfig.LoadOptions) error, error) {
	if guard == nil || !guard.Restricts() {
		return nil, nil
	}
	home, known := guard.ClientEnv("HOME")
	configFile, _ := guard.ClientEnv("AWS_CONFIG_FILE")
	credentialsFile, _ := guard.ClientEnv("AWS_SHARED_CREDENTIALS_FILE")
	if !known {
		home = guard.AccountHome()
	}
	if home == "" && (configFile == "" || credentialsFile == "") {
		return nil, invalidConfig(errors.New("sigv4: a credential plugin policy restricts which code runs, and neither the client's environment nor the account's home directory is known, so kplug cannot tell which AWS configuration (whose credential_process would run) is yours"))
	}
	if configFile == "" {
		configFile = filepath.Join(home, ".aws", "config")
	}
	if credentialsFile == "" {
		credentialsFile = filepath.Join(home, ".aws", "credentials")
	}
	return []func(*awsconfig.LoadOptions) error{
		awsconfig.WithSharedConfigFiles([]string{configFile}),
		awsconfig.WithSharedCredentialsFiles([]string{credentialsFile}),
	}, nil
}
