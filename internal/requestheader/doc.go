// Package requestheader keeps a front proxy and the kube-apiserver behind it agreeing on
// the identity headers: kube-apiserver believes the user named in its
// --requestheader-username-headers (and groups, UID, extras) from any request that
// presents a front-proxy client certificate, so a proxy holding that certificate must
// remove every such name from its clients' requests, not only those it sets. Which names
// kube-apiserver reads it publishes in the ConfigMap
// kube-system/extension-apiserver-authentication; Check compares them with the proxy's,
// and a Gate forwards nothing until a reading has succeeded and fitted. kplug peerproxy
// and kplug signature-proxy both use it.
package requestheader
