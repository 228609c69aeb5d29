package proxyplugin

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"

	"github.com/kplug/kplug/internal/execcache"
	"github.com/kplug/kplug/keys"
)

// guardedKeyOptions are KeyOptions for the key uri names, once the PKCS#11 module it would
// load (module-path= or $KPLUG_PKCS11_MODULE) has passed the client's policy: under a
// policy that restricts plugins, the module must be given by its absolute path and be on
// the allowlist, like a plugin.
//
// Under such a policy the key URI is the exec block's, not the user's, so a tpm: URI may
// not choose the TPM (device=) nor the file whose content goes to it as the auth value
// (pin-source=), and $KPLUG_TPM_DEVICE, $KPLUG_TPM_PIN and $KPLUG_PKCS11_PIN must be the
// client's (issue 30 review, F1; second review, N1).
func guardedKeyOptions(guard *execcache.Guard, flag, uri string) (keys.Options, error) {
	ko := KeyOptions()
	if guard == nil || !guard.Restricts() {
		return ko, nil
	}
	if err := RefuseTPMQuery(uri, "a credential plugin policy restricts what an exec block chooses"); err != nil {
		return ko, invalidConfig(fmt.Errorf("%s: %w", flag, err))
	}
	// The TPM a key's auth value goes to, and the PINs sent to a TPM or token, where each
	// wrong one counts towards locking out every key there (issue 30 second review, N1).
	for _, env := range []struct{ name, value, why string }{
		{TPMDeviceEnv, ko.TPMDevice, "the TPM receives the key's auth value"},
		{TPMPINEnv, ko.TPMPIN, "a wrong auth value counts towards the TPM's lockout of all its keys"},
		{PKCS11PINEnv, ko.PIN, "a wrong PIN counts towards the token's lockout"},
	} {
		if env.value == "" {
			continue
		}
		if client, known := guard.ClientEnv(env.name); !known || client != env.value {
			return ko, invalidConfig(fmt.Errorf("%s: $%s is set by the exec block, not by the client that runs kplug: a credential plugin policy restricts what an exec block chooses, and %s; set it in your own environment", flag, env.name, env.why))
		}
	}
	if !strings.HasPrefix(strings.ToLower(uri), "pkcs11:") {
		return ko, nil
	}
	u, err := keys.ParsePKCS11URI("pkcs11:" + uri[len("pkcs11:"):])
	if err != nil {
		return ko, invalidConfig(fmt.Errorf("%s: %w", flag, err))
	}
	module, from := u.ModulePath, "module-path"
	if module == "" {
		module, from = ko.PKCS11Module, "$"+PKCS11ModuleEnv
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

// RefuseTPMQuery refuses a tpm: URI with device= or pin-source=, which choose where the
// key's auth value is read from and sent to, when the URI is not the user's own (why says
// whose it is): the user gives them as $KPLUG_TPM_DEVICE and $KPLUG_TPM_PIN instead.
func RefuseTPMQuery(uri, why string) error {
	if len(uri) < len("tpm:") || !strings.EqualFold(uri[:len("tpm:")], "tpm:") {
		return nil
	}
	u, err := keys.ParseTPMURI("tpm:" + uri[len("tpm:"):])
	if err != nil {
		return err
	}
	if u.Device != "" || u.PINSource != "" {
		return fmt.Errorf("a tpm: URI here may not have device= or pin-source= (%s, and they choose where the key's auth value goes and comes from): set $%s and $%s in your own environment", why, TPMDeviceEnv, TPMPINEnv)
	}
	return nil
}
