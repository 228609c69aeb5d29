// Package load is kplug's load, soak and fault harness for its two proxies, the mixed
// version proxy sidecar (`kplug peerproxy`) and the exec proxy (`kplug run`,
// execproxy.Connect), against real kube-apiservers: traffic (package
// test/e2e/traffic) through each proxy and straight to the apiserver side by side, the
// proxies' memory, goroutines and sockets over time, faults injected under the traffic
// with their outcomes checked, and the report in docs/reliability.md with its plots.
//
// `make test` runs the fault scenarios in a short form (TestFaults); `make load` runs the
// long form and the steady load, and writes the report (TestLoad, with -load).
package load
