// Package execcache is `kplug exec-cache`: an exec credential plugin that wraps another
// and shares its answers between client processes through a disk cache, so that N kubectl
// invocations, sequential or concurrent, run an expensive plugin once per credential
// lifetime instead of N times.
//
// Run is one invocation: it keys the call (Key), takes the key's file lock (a concurrent
// caller waits, then finds the answer stored), serves a stored answer byte for byte or
// runs the wrapped plugin through internal/execplugin with the caller's environment, stdin
// and stderr, and stores a valid answer (diskstore.Store: 0600 files, atomic writes, in a
// private directory that must belong to the user). A stored answer is not served to a
// client that was already given it: client-go only runs a plugin again after the
// credential expired or the server answered 401, so such a call is a refresh and the entry
// is replaced. List and Clear are for `--list` and `--clear`.
package execcache
