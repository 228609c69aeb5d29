package execcache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"

	"github.com/kplug/kplug/internal/privdir"
)

// maxIdentityFile bounds what is read of one identity file. The largest in practice is an
// Azure CLI profile listing every subscription a user can see, a few hundred bytes each.
const maxIdentityFile = 1 << 20

// Digests of identity files that are not a readable regular file, as they enter the key.
// A missing file is the empty string: a distinct value, which creating the file changes.
const (
	digestNotRegular = "not a regular file"
	digestUnreadable = "unreadable"
)

// identityFiles returns the files whose content selects a known plugin's identity, for a
// plugin run with the environment getenv gives: a configuration that says which account,
// profile or subscription is the current one, switched by editing it or by the cloud's
// CLI (`gcloud config set account`, `az account set`). The paths are derived the way the
// plugins derive them, from the same variables. Files the plugins write on their own, such
// as token caches, are not among them: they record a login rather than choose one, and
// they change on every refresh.
type identityFiles func(getenv func(string) string) []string

// fileDigests returns "path=digest" for each file, the digest being fileDigest's.
func fileDigests(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		out = append(out, p+"="+fileDigest(p))
	}
	return out
}

// fileDigest says what the key holds of the file at path: "" when it is missing, else the
// SHA-256 of its content when it is a regular file (a symbolic link is followed to one,
// since people link their dotfiles); a larger file than maxIdentityFile contributes its
// first maxIdentityFile bytes and its size. Anything else (a FIFO, a device, a directory,
// a file it may not read) is one of the digest constants, never an error: the key must
// not fail, and the plugin reports what is wrong with its configuration.
func fileDigest(path string) string {
	f, err := privdir.OpenLinked(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return ""
	case errors.Is(err, privdir.ErrNotRegular):
		return digestNotRegular
	case err != nil:
		return digestUnreadable
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, maxIdentityFile))
	if err != nil {
		return digestUnreadable
	}
	if n == maxIdentityFile {
		if info, err := f.Stat(); err == nil && info.Size() > n {
			fmt.Fprintf(h, "\x00size %d", info.Size())
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// homeDir is the home directory the plugins use: os.UserHomeDir's rule, on the plugin's
// environment (the AWS SDK, azd and Go's oauth2 use it; the Python CLIs expand ~ the same
// way). Empty when the variable is unset: files under it are then left out.
func homeDir(getenv func(string) string) string {
	if runtime.GOOS == "windows" {
		return getenv("USERPROFILE")
	}
	return getenv("HOME")
}

// underHome joins elem to the home directory, or returns "" when there is none.
func underHome(getenv func(string) string, elem ...string) string {
	home := homeDir(getenv)
	if home == "" {
		return ""
	}
	return filepath.Join(append([]string{home}, elem...)...)
}

// expandHome expands a leading ~ in a path taken from a variable, as the AWS CLI does.
func expandHome(getenv func(string) string, path string) string {
	if rest, ok := strings.CutPrefix(path, "~"); ok && (rest == "" || rest[0] == '/' || rest[0] == filepath.Separator) {
		return underHome(getenv, rest)
	}
	return path
}

// orUnderHome is the value of the variable name, or else the path under the home directory.
func orUnderHome(getenv func(string) string, name string, elem ...string) string {
	if v := getenv(name); v != "" {
		return expandHome(getenv, v)
	}
	return underHome(getenv, elem...)
}

// compact drops empty paths (no home directory) and repeats, keeping the order.
func compact(paths ...string) []string {
	out := paths[:0]
	for _, p := range paths {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// awsFiles: aws-iam-authenticator (aws-sdk-go's shared configuration, SharedConfigEnable)
// and the AWS CLI read the profiles, and the keys or role of each, from the shared config
// and credentials files.
func awsFiles(getenv func(string) string) []string {
	return compact(
		orUnderHome(getenv, "AWS_CONFIG_FILE", ".aws", "config"),
		orUnderHome(getenv, "AWS_SHARED_CREDENTIALS_FILE", ".aws", "credentials"),
	)
}

// gcloudConfigName is the form of a gcloud configuration name; NONE is the reserved name
// of no configuration, which has no file.
var gcloudConfigName = regexp.MustCompile(`^[a-z][-a-z0-9]*$`)

// gcloudFiles: gcloud (which gke-gcloud-auth-plugin runs: `gcloud config config-helper`)
// reads the account from the active configuration, configurations/config_NAME in its
// configuration directory ($CLOUDSDK_CONFIG, else ~/.config/gcloud, %APPDATA%\gcloud on
// Windows), NAME being $CLOUDSDK_ACTIVE_CONFIG_NAME, else the content of active_config,
// else "default". `gcloud config set account` edits that file, and `gcloud config
// configurations activate` names another. With --use_application_default_credentials the
// plugin reads application default credentials instead: the file
// $GOOGLE_APPLICATION_CREDENTIALS names, else the one `gcloud auth application-default
// login` writes (in the configuration directory; Go's oauth2 looks in the default one).
func gcloudFiles(getenv func(string) string) []string {
	dflt := underHome(getenv, ".config", "gcloud")
	if runtime.GOOS == "windows" {
		dflt = ""
		if appdata := getenv("APPDATA"); appdata != "" {
			dflt = filepath.Join(appdata, "gcloud")
		}
	}
	dir := getenv("CLOUDSDK_CONFIG")
	if dir == "" {
		dir = dflt
	}
	if dir == "" {
		return compact(getenv("GOOGLE_APPLICATION_CREDENTIALS"))
	}
	name := getenv("CLOUDSDK_ACTIVE_CONFIG_NAME")
	if name == "" {
		name = activeGcloudConfig(filepath.Join(dir, "active_config"))
	}
	config := ""
	if name != "NONE" {
		config = filepath.Join(dir, "configurations", "config_"+name)
	}
	const adc = "application_default_credentials.json"
	wellKnown := ""
	if dflt != "" {
		wellKnown = filepath.Join(dflt, adc)
	}
	return compact(config, getenv("GOOGLE_APPLICATION_CREDENTIALS"), filepath.Join(dir, adc), wellKnown)
}

// activeGcloudConfig is the configuration name active_config holds, or "default" when it
// is missing, empty or not a valid name (gcloud then removes it and uses the default).
func activeGcloudConfig(path string) string {
	f, err := privdir.OpenLinked(path)
	if err != nil {
		return "default"
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	name := strings.TrimSpace(string(b))
	if err != nil || !gcloudConfigName.MatchString(name) && name != "NONE" {
		return "default"
	}
	return name
}

// azureFiles: the Azure CLI (which Azure/kubelogin runs with --login azurecli: `az account
// get-access-token`) answers for the default subscription's account in azureProfile.json,
// in the active cloud named in its config file, both in $AZURE_CONFIG_DIR, else ~/.azure;
// `az account set` and `az cloud set` edit them. With --login azd, kubelogin runs `azd auth
// token`, whose current user is in auth.json and config.json in $AZD_CONFIG_DIR, else
// ~/.azd.
func azureFiles(getenv func(string) string) []string {
	az := orUnderHome(getenv, "AZURE_CONFIG_DIR", ".azure")
	azd := orUnderHome(getenv, "AZD_CONFIG_DIR", ".azd")
	var paths []string
	if az != "" {
		paths = append(paths, filepath.Join(az, "azureProfile.json"), filepath.Join(az, "config"))
	}
	if azd != "" {
		paths = append(paths, filepath.Join(azd, "auth.json"), filepath.Join(azd, "config.json"))
	}
	return compact(paths...)
}
