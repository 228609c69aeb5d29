// Package plugin helps write exec credential plugins: read what the client passed in
// KUBERNETES_EXEC_INFO (the API version it wants, whether it is interactive, the cluster),
// answer in that version, and cache a credential on disk so that an expensive login is not
// repeated by every kubectl invocation. Store, which Cache is built on, keeps any JSON
// document per key, with a file lock each; use it when an entry holds more than a
// credential, as kplug exec-cache does.
//
//	func main() {
//		info, err := plugin.LoadInfo(os.Getenv(execcred.InfoEnv))
//		if err != nil { ... }
//		cache := &plugin.Cache{Dir: plugin.DefaultCacheDir("my-plugin")}
//		status, err := cache.Do(ctx, "prod", func(ctx context.Context) (*execcred.Status, error) {
//			return login(ctx, info) // the expensive part
//		})
//		if err != nil { ... }
//		if err := plugin.Write(os.Stdout, info, status); err != nil { ... }
//	}
package plugin
