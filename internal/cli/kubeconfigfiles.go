package cli

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigFiles loads a kubeconfig context as kubectl does: the file at --kubeconfig,
// else the files of $KUBECONFIG merged, else ~/.kube/config; the given context, else the
// current one. It is the one place kplug reads a kubeconfig, so that every command says
// the same thing about a missing file or context, naming the files, where client-go says
// "no configuration has been provided, try setting KUBERNETES_MASTER environment
// variable", a variable neither kubectl nor kplug reads.
type kubeconfigFiles struct {
	rules   *clientcmd.ClientConfigLoadingRules
	context string
	fromEnv bool   // the files are $KUBECONFIG's
	server  string // in place of the cluster's
	// noContextFlag: the command has no --context to suggest (kplug peerproxy).
	noContextFlag bool
	clientcmd.ClientConfig
}

// newKubeconfigFiles loads path (empty: $KUBECONFIG, then ~/.kube/config) and context
// (empty: the current context), with server, if set, in place of the context's cluster's.
func newKubeconfigFiles(path, context, server string) *kubeconfigFiles {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	overrides := &clientcmd.ConfigOverrides{CurrentContext: context}
	overrides.ClusterInfo.Server = server
	return &kubeconfigFiles{
		rules:        rules,
		context:      context,
		server:       server,
		fromEnv:      path == "" && os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "",
		ClientConfig: clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides),
	}
}

// restConfig is the context's client configuration. When it cannot be had for a missing
// file, context or cluster, the error says which, in kplug's words.
func (k *kubeconfigFiles) restConfig() (*rest.Config, error) {
	cfg, err := k.ClientConfig.ClientConfig()
	if err == nil {
		return cfg, nil
	}
	if why := k.unusable(); why != nil {
		return nil, why
	}
	return nil, err
}

// unusable says why the context cannot be used, naming the files looked at: none of them
// exists, none sets a current context, or the context or its cluster is not there. It is
// nil when none of these is the reason.
func (k *kubeconfigFiles) unusable() error {
	var looked, found []string
	for _, f := range k.rules.GetLoadingPrecedence() {
		if f == "" {
			continue
		}
		looked = append(looked, f)
		if _, err := os.Stat(f); err == nil {
			found = append(found, f)
		}
	}
	switch {
	case len(found) > 0:
	case k.rules.ExplicitPath != "":
		return fmt.Errorf("--kubeconfig %s does not exist", k.rules.ExplicitPath)
	case k.fromEnv && len(looked) == 1:
		return fmt.Errorf("$KUBECONFIG names %s, which does not exist; set KUBECONFIG or --kubeconfig to a kubeconfig file", looked[0])
	case k.fromEnv:
		return fmt.Errorf("$KUBECONFIG names %s, none of which exists; set KUBECONFIG or --kubeconfig to a kubeconfig file", listOf(looked, "and"))
	default:
		return fmt.Errorf("%s does not exist and $KUBECONFIG is not set; give --kubeconfig, or set KUBECONFIG, to a kubeconfig file", listOf(looked, "and"))
	}
	raw, err := k.RawConfig()
	if err != nil {
		return nil
	}
	return k.contextProblem(raw, listOf(found, "or"))
}

// contextProblem says why the context of raw, read from files, has no cluster to talk
// to; nil if it has one.
func (k *kubeconfigFiles) contextProblem(raw clientcmdapi.Config, files string) error {
	name := k.context
	if name == "" {
		name = raw.CurrentContext
	}
	switch {
	case name == "" && !k.noContextFlag:
		return fmt.Errorf("no current-context in %s; give --context", files)
	case name == "":
		return fmt.Errorf("no current-context in %s; set its current-context", files)
	}
	kctx := raw.Contexts[name]
	if kctx == nil {
		names := make([]string, 0, len(raw.Contexts))
		for n := range raw.Contexts {
			names = append(names, fmt.Sprintf("%q", n))
		}
		if len(names) == 0 {
			return fmt.Errorf("no context %q in %s: there are no contexts", name, files)
		}
		slices.Sort(names)
		return fmt.Errorf("no context %q in %s; contexts there: %s", name, files, strings.Join(names, ", "))
	}
	switch c := raw.Clusters[kctx.Cluster]; {
	case k.server != "":
		// The cluster's server is not used.
	case c == nil:
		return fmt.Errorf("context %q names cluster %q, which is not in %s", name, kctx.Cluster, files)
	case c.Server == "":
		return fmt.Errorf("cluster %q of context %q has no server in %s", kctx.Cluster, name, files)
	}
	return nil
}

// listOf joins items as a sentence does: "a", "a and b", "a, b and c".
func listOf(items []string, conjunction string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conjunction + " " + items[len(items)-1]
}
