// Package oskeyring keeps small secrets in the operating system's keyring, so that kplug's
// caches need not write credentials to disk: the Secret Service (GNOME Keyring, KeePassXC,
// KWallet's ksecretd) or the kernel's per-user keyring on Linux, the login Keychain on
// macOS, the Credential Manager on Windows.
//
// A Keyring stores one item per account name, each bounded by the keyring's own limits;
// Put, Fetch and Remove store a blob of any reasonable size as compressed, numbered items
// with a header that makes a half-written or mismatched set read as missing, never as a
// wrong secret. Open chooses and connects to a keyring; nothing happens before it is
// called, and every call is bounded by a timeout, so an unreachable keyring is one error,
// not a hang.
//
// The package is on exec-cache's hot path: it depends on the standard library,
// golang.org/x/sys, godbus (Linux) and go-keyring (macOS, Windows) only.
package oskeyring
