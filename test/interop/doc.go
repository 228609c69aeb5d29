// Package interop checks kplug's protocol implementations against implementations
// nobody here wrote: httpsig against the npm package http-message-signatures (pinned in
// rfc9421/package-lock.json, installed by `make tools`), run with node.
package interop
