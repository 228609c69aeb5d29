package execcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/kplug/kplug/execcred/wire"
)

// IgnoredEnv lists the environment variables left out of the cache key by default: they
// differ between terminals, shells and directories of one user and never choose whose
// credential a plugin returns. A name ending in '*' is a prefix. KUBERNETES_EXEC_INFO is
// keyed by its parts instead (the API version and the cluster).
var IgnoredEnv = []string{
	wire.InfoEnv,
	"_", "PWD", "OLDPWD", "SHLVL", "PS1", "PS2", "PS4", "PROMPT_COMMAND", "HIST*",
	"LINES", "COLUMNS", "TERM", "TERMINFO", "COLORTERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION",
	"TERM_SESSION_ID", "TERMINAL_EMULATOR", "LS_COLORS", "LSCOLORS", "CLICOLOR", "WINDOWID",
	"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "DBUS_SESSION_BUS_ADDRESS", "GPG_TTY",
	"SSH_TTY", "SSH_CLIENT", "SSH_CONNECTION", "SSH_AUTH_SOCK", "SSH_AGENT_PID", "TMUX", "TMUX_PANE",
	"STY", "WINDOW", "VTE_VERSION", "INVOCATION_ID", "JOURNAL_STREAM", "SECURITYSESSIONID",
	"XDG_SESSION_*", "XDG_VTNR", "ITERM_*", "KITTY_*", "WEZTERM_*", "ALACRITTY_*", "KONSOLE_*",
	"GNOME_TERMINAL_*", "VSCODE_*", "LC_TERMINAL*", "__CF*",
	// One value per tab or shell: Windows Terminal, ConEmu, shell prompts and multiplexers.
	"WT_SESSION", "WT_PROFILE_ID", "ConEmu*", "STARSHIP_SESSION_KEY", "STARSHIP_SHELL",
	"POWERLINE_*", "ZELLIJ*", "WSLENV", "TERMUX_*", "OSC_*",
	// Where kuberc is: its policy is checked before any lookup and never selects whose
	// credential a plugin returns.
	"KUBERC", "KUBECTL_KUBERC",
}

// identity says which environment variables choose whose credential a family of plugins
// returns: the account, profile, configuration directory or key they read. For these
// plugins the cache key holds only those variables (and the user's --key-env), so that
// the same person's terminal and desktop, whose environments differ in everything else,
// share an entry, while switching any of them gives another entry.
type identity struct {
	name     string
	commands []string // base names of the executable, without .exe
	env      []string // names, or prefixes ending in '*'
	// files are the configuration files whose content selects the identity too; nil for
	// a plugin whose identity is in its arguments and variables only.
	files identityFiles
}

// identities are the plugins exec-cache knows. HOME is in each: it is where their
// configuration and token caches live.
var identities = []identity{
	{
		// aws-iam-authenticator token and aws eks get-token: AWS_PROFILE, the static keys,
		// AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE, AWS_CONFIG_FILE, the region, ...; and
		// aws-iam-authenticator's own KUBERNETES_AWS_AUTHENTICATOR_CLUSTER_ID and
		// DEFAULT_ROLE (its -i and -r).
		name:     "aws",
		commands: []string{"aws-iam-authenticator", "aws"},
		env:      []string{"HOME", "AWS_*", "KUBERNETES_AWS_AUTHENTICATOR_*", "DEFAULT_ROLE"},
		files:    awsFiles,
	},
	{
		// gke-gcloud-auth-plugin and gcloud: CLOUDSDK_CONFIG, CLOUDSDK_CORE_ACCOUNT,
		// CLOUDSDK_ACTIVE_CONFIG_NAME, GOOGLE_APPLICATION_CREDENTIALS, the metadata server.
		name:     "gcloud",
		commands: []string{"gke-gcloud-auth-plugin", "gcloud"},
		env:      []string{"HOME", "CLOUDSDK_*", "GOOGLE_*", "GCE_METADATA_*", "USE_GKE_GCLOUD_AUTH_PLUGIN"},
		files:    gcloudFiles,
	},
	{
		// Azure/kubelogin and az: AZURE_CLIENT_ID, AZURE_TENANT_ID, AZURE_CONFIG_DIR,
		// AZURE_FEDERATED_TOKEN_FILE, AAD_SERVICE_PRINCIPAL_*, the Terraform ARM_*, Azure
		// Pipelines and GitHub Actions (the job's federated token) variables kubelogin also
		// reads, managed identity endpoints, and the token cache under KUBECACHEDIR. int128/kubelogin may be installed as kubelogin
		// too; its identity is in its arguments and its token cache.
		name:     "azure",
		commands: []string{"kubelogin", "az"},
		env: []string{"HOME", "KUBECACHEDIR", "AZURE_*", "AAD_*", "ARM_*", "AZURESUBSCRIPTION_*", "SYSTEM_ACCESSTOKEN",
			"SYSTEM_OIDCREQUESTURI", "ACTIONS_ID_TOKEN_REQUEST_*", "IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_*", "IMDS_ENDPOINT",
			"AZD_CONFIG_DIR"},
		files: azureFiles,
	},
	{
		// int128/kubelogin as a kubectl plugin: the issuer and client are arguments; the
		// token cache is under KUBECACHEDIR (or its --token-cache-dir argument).
		name:     "oidc-login",
		commands: []string{"kubectl-oidc_login", "kubectl-oidc-login"},
		env:      []string{"HOME", "KUBECACHEDIR"},
	},
}

// identityOf returns the identity of the plugin at path, or nil for a plugin exec-cache
// does not know.
func identityOf(path string) *identity {
	base := filepath.Base(path)
	if runtime.GOOS == "windows" {
		base = strings.TrimSuffix(strings.ToLower(base), ".exe")
	}
	for i := range identities {
		if slices.Contains(identities[i].commands, base) {
			return &identities[i]
		}
	}
	return nil
}

// keyDoc is what the cache key is a hash of. Field names are part of the on-disk format:
// changing them changes every key (which only costs one run per entry).
type keyDoc struct {
	Schema  int      `json:"schema"`
	Command string   `json:"command"`
	Args    []string `json:"args"`
	// Rule says how Env was chosen: "environment" (all of it but IgnoredEnv), or the
	// identity variables of a known plugin ("aws", ...) and/or the user's ("declared").
	Rule string   `json:"rule"`
	Env  []string `json:"env"`
	// Files are "path=digest" of a known plugin's identity files (identityFiles,
	// fileDigest), so that switching identity through a file gives another entry.
	Files []string `json:"files,omitempty"`
	// Selection is the exec block's --ignore-env and --key-env, which choose what Env
	// holds: two exec blocks that leave different variables out of the key never share an
	// entry, so one that ignores the variables carrying its own identity cannot answer for
	// another that runs the same command (issue 27).
	Selection  []string      `json:"selection,omitempty"`
	APIVersion string        `json:"apiVersion"`
	Cluster    *wire.Cluster `json:"cluster,omitempty"`
}

const keySchema = 2

// KeyEnv chooses the environment variables in the cache key. The zero value keys on the
// whole environment but IgnoredEnv, for plugins exec-cache does not know.
type KeyEnv struct {
	// Ignore adds names (or prefixes ending in '*') to IgnoredEnv.
	Ignore []string
	// Declare names the variables (or prefixes) that choose the plugin's identity: with
	// it, or for a plugin exec-cache knows, the key holds only those variables (the
	// known plugin's and these), not the whole environment.
	Declare []string
}

// Key is the cache key of one answer: a hash of the wrapped command's resolved path and
// arguments, the environment variables that choose whose credential it returns (KeyEnv),
// for a plugin exec-cache knows the content of the files that choose it too (a digest of
// each, read on every call), the API version the client asked for, and the cluster the
// client sent (provideClusterInfo). Two clusters the client tells apart never share an
// entry, and no environment value or file content is stored anywhere but in the hash.
func Key(path string, args, env []string, info *wire.Info, sel KeyEnv) string {
	rule, names, files := "environment", []string(nil), []string(nil)
	if id := identityOf(path); id != nil {
		rule, names = id.name, id.env
		if id.files != nil {
			files = fileDigests(id.files(func(name string) string { return lookupEnv(env, name) }))
		}
	}
	if len(sel.Declare) > 0 {
		if names == nil {
			rule = "declared"
		} else {
			rule += "+declared"
		}
		names = append(slices.Clip(names), sel.Declare...)
	}
	doc := keyDoc{
		Schema:     keySchema,
		Command:    path,
		Args:       args,
		Rule:       rule,
		Env:        keyEnv(env, names, sel.Ignore),
		Files:      files,
		Selection:  selection(sel),
		APIVersion: info.APIVersion,
		Cluster:    info.Cluster,
	}
	if doc.Args == nil {
		doc.Args = []string{}
	}
	b, err := json.Marshal(doc)
	if err != nil { // strings, a bool and raw JSON from a decoded document: cannot fail
		panic("execcache: encoding a cache key: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// selection lists sel as "ignore NAME" and "declare NAME", sorted and without
// duplicates; nil when both are empty, so keys made without them do not change.
func selection(sel KeyEnv) []string {
	var out []string
	for _, n := range sel.Ignore {
		out = append(out, "ignore "+n)
	}
	for _, n := range sel.Declare {
		out = append(out, "declare "+n)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// keyEnv returns env without ignored names, and only the names in only when it is not
// nil, one entry per name (the last wins, as for exec), sorted.
func keyEnv(env, only, ignore []string) []string {
	byName := map[string]string{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if ignored(name, IgnoredEnv) || ignored(name, ignore) || (only != nil && !ignored(name, only)) {
			continue
		}
		byName[envName(name)] = kv
	}
	out := make([]string, 0, len(byName))
	for _, kv := range byName {
		out = append(out, kv)
	}
	slices.Sort(out)
	return out
}

func ignored(name string, patterns []string) bool {
	name = envName(name)
	for _, p := range patterns {
		p = envName(p)
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if name == p {
			return true
		}
	}
	return false
}

// envName folds case on Windows, where environment names are case-insensitive.
func envName(name string) string {
	if runtime.GOOS == "windows" {
		return strings.ToUpper(name)
	}
	return name
}
