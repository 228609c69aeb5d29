// Package execplugin is the one place where kplug runs a plugin binary: exec credential
// plugins, exec proxy plugins and image credential providers all go through Runner.Run.
//
// A run resolves the command (absolute path, path relative to a base directory, or bare
// name through PATH), composes the environment, wires stdin, captures stdout up to a cap
// while passing stderr through and keeping its tail, and on cancellation or timeout kills
// the plugin's whole process group so that nothing it started is left behind. Every
// failure comes back as a typed error that callers inspect with errors.As.
//
// # Environment
//
// The plugin's environment is built from three layers, in order:
//
//  1. the host environment (Runner.Environ, os.Environ by default);
//  2. the caller's entries (Command.Env), for example a kubeconfig's exec env;
//  3. reserved entries (Command.Reserved), for example KUBERNETES_EXEC_INFO.
//
// When a name appears more than once, the last value wins, so the caller overrides the host
// and nobody overrides a reserved variable. The plugin sees each name exactly once. Names
// are compared case-insensitively on Windows, as the OS does.
//
// # Process groups
//
// On Unix a non-interactive plugin runs in a process group of its own. Cancelling the
// context, or the timeout, sends SIGTERM to the group, then SIGKILL after Runner.KillGrace.
// A plugin that reads the terminal (TerminalStdin) stays in the caller's process group,
// because a background group that reads the terminal is stopped by SIGTTIN; only the plugin
// itself is signalled then. Windows has no process groups: the plugin alone is killed.
package execplugin
