package execcache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
}

// keyDoc is what the cache key is a hash of. Field names are part of the on-disk format:
// changing them changes every key (which only costs one run per entry).
type keyDoc struct {
	Schema     int           `json:"schema"`
	Command    string        `json:"command"`
	Args       []string      `json:"args"`
	Env        []string      `json:"env"`
	APIVersion string        `json:"apiVersion"`
	Cluster    *wire.Cluster `json:"cluster,omitempty"`
}

const keySchema = 1

// Key is the cache key of one answer: a hash of the wrapped command's resolved path and
// arguments, the environment minus ignored names, the API version the client asked for,
// and the cluster the client sent (provideClusterInfo). Two clusters the client tells apart
// never share an entry, and no environment value is stored anywhere but in the hash.
func Key(path string, args, env []string, info *wire.Info, ignore []string) string {
	doc := keyDoc{
		Schema:     keySchema,
		Command:    path,
		Args:       args,
		Env:        keyEnv(env, ignore),
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

// keyEnv returns env without ignored names, one entry per name (the last wins, as for
// exec), sorted.
func keyEnv(env, ignore []string) []string {
	byName := map[string]string{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if ignored(name, IgnoredEnv) || ignored(name, ignore) {
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
