// Package execcache is `kplug exec-cache`: an exec credential plugin that wraps another
// and shares its answers between client processes through a disk cache, so that N kubectl
// invocations, sequential or concurrent, run an expensive plugin once per credential
// lifetime instead of N times.
//
// Run is one invocation, and the exec credential pipeline seen from the plugin side of the
// wire, where an answer is bytes passed on unchanged:
//
//   - configuration: Options (from the CLI's flags) and the client's KUBERNETES_EXEC_INFO,
//     which with the command, its arguments and the environment make the cache key (Key);
//   - source: the wrapped plugin, run through execplugin with the caller's environment,
//     stdin and stderr, exactly as the client would have run it;
//   - decorator: the key's entry in a private directory (internal/diskstore: 0600 files,
//     atomic writes, a directory that must belong to the user), under the key's file lock,
//     so that a concurrent caller waits and then finds the answer stored. A stored answer
//     is served byte for byte, except to a client that was already given it: client-go
//     only runs a plugin again after the credential expired or the server answered 401,
//     so such a call is a refresh and the entry is replaced. A valid answer is stored:
//     in the entry file, or with Options.Storage a keyring in the OS keyring (vault,
//     internal/oskeyring), the entry file then keeping everything but the credential;
//   - output: stdout, where a failing plugin's own stdout passes through too.
//
// List and Clear are for `--list` and `--clear`.
package execcache
