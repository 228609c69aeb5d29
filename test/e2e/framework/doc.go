// Package framework starts a real Kubernetes control plane on loopback for end-to-end tests:
// one etcd and one or more kube-apiservers sharing it, built from pinned modules by
// `make tools`, with generated PKI, users and kubeconfigs.
//
// Each apiserver can differ from the others by extra flags and feature gates, which is how
// tests build the mixed-version situations of KEP-4020. Started as root, each apiserver
// gets its own UTS namespace and hostname, so that each holds an identity Lease of its own.
// Every process runs in its own process group and, on Linux, dies with the test process;
// StartForTest stops everything when the test ends and prints the logs of a failed test.
package framework
