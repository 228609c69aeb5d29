// Package diskstore is kplug's one on-disk store: JSON documents shared by the processes of
// one user (the exec credential caches of `kplug exec-cache` and the plugin SDK, the image
// credential DirCache), in a private directory checked with privdir before every use,
// written atomically, with a file lock per key for read-modify-write.
package diskstore
