package kuberc

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Options say where kubectl would look for kuberc. A program fills them from its own
// flag and environment (this package reads neither): Path from a --kuberc flag, Env from
// $KUBERC, Home from HomeDir(os.Getenv), Disabled from KUBECTL_KUBERC=false.
type Options struct {
	// Path is a file named explicitly, as with kubectl's --kuberc flag.
	Path string
	// Env is the value of $KUBERC: a file, "off" for no kuberc, or empty.
	Env string
	// Home is the home directory; the default file is <Home>/.kube/kuberc. As in kubectl,
	// an empty Home makes it .kube/kuberc in the working directory.
	Home string
	// Disabled turns kuberc off, as KUBECTL_KUBERC=false (the feature gate) does for
	// kubectl.
	Disabled bool
}

// FromEnv returns the Options kubectl would take from its environment (KUBERC,
// KUBECTL_KUBERC and the home directory), read with getenv, and the explicit file path.
func FromEnv(path string, getenv func(string) string) Options {
	return Options{
		Path:     path,
		Env:      getenv("KUBERC"),
		Home:     HomeDir(getenv),
		Disabled: strings.EqualFold(getenv("KUBECTL_KUBERC"), "false"),
	}
}

// DefaultPath is where kubectl looks for kuberc when nothing names a file.
func DefaultPath(home string) string { return filepath.Join(home, ".kube", "kuberc") }

// Locate returns the kuberc file kubectl 1.36 would read: the explicit Path, else $KUBERC,
// else the default file; none when KUBERC=off or Disabled. explicit says a file was named
// (Path or $KUBERC), so that a missing or unusable one is an error; the default file may
// be missing. Naming a file while kuberc is off is an error.
//
// As in kubectl, a Path equal to the default file counts as not given when $KUBERC names
// another file.
func Locate(o Options) (path string, explicit bool, err error) {
	switch {
	case o.Disabled && o.Path != "":
		return "", false, errors.New("kuberc: KUBECTL_KUBERC=false turns kuberc off, so no kuberc file can be given")
	case o.Disabled:
		return "", false, nil
	case o.Env == "off" && o.Path != "":
		return "", false, errors.New("kuberc: disabling kuberc via KUBERC=off and passing kuberc flag are mutually exclusive")
	case o.Env == "off":
		return "", false, nil
	}
	def := DefaultPath(o.Home)
	path = def
	if o.Path != "" {
		path, explicit = o.Path, true
	}
	if path == def && o.Env != "" {
		path, explicit = o.Env, true
	}
	return path, explicit, nil
}

// HomeDir returns the home directory as kubectl finds it (client-go's homedir.HomeDir),
// with getenv reading the environment: $HOME, except on Windows, where it is the first of
// %HOME%, %HOMEDRIVE%%HOMEPATH% and %USERPROFILE% that holds .kube\config, else the first
// of %HOME%, %USERPROFILE% and %HOMEDRIVE%%HOMEPATH% that is a writable directory, else the
// first that exists, else the first that is set.
func HomeDir(getenv func(string) string) string {
	if runtime.GOOS != "windows" {
		return getenv("HOME")
	}
	home, profile := getenv("HOME"), getenv("USERPROFILE")
	drivePath := ""
	if drive, p := getenv("HOMEDRIVE"), getenv("HOMEPATH"); drive != "" && p != "" {
		drivePath = drive + p
	}
	for _, p := range []string{home, drivePath, profile} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(p, ".kube", "config")); err == nil {
			return p
		}
	}
	firstSet, firstExisting := "", ""
	for _, p := range []string{home, profile, drivePath} {
		if p == "" {
			continue
		}
		if firstSet == "" {
			firstSet = p
		}
		info, err := os.Stat(p)
		if err != nil {
			continue
		}
		if firstExisting == "" {
			firstExisting = p
		}
		if info.IsDir() && info.Mode().Perm()&0o200 != 0 {
			return p
		}
	}
	if firstExisting != "" {
		return firstExisting
	}
	return firstSet
}
