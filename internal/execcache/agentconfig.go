package execcache

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/kplug/kplug/execcred/wire"
	"github.com/kplug/kplug/internal/privdir"
)

// maxKubeconfig bounds a kubeconfig file the agent reads.
const maxKubeconfig = 16 << 20

// execExtension is the cluster extension client-go passes to a plugin as spec.cluster.config.
const execExtension = "client.authentication.k8s.io/exec"

// kubeconfig is the part of a kubeconfig the agent reads: which exec plugins its users
// name, and for a plugin given cluster information, the clusters its contexts pair them
// with. It is read as client-go reads it: of several files in KUBECONFIG, the first to
// define a name wins, and a relative certificate-authority path is relative to its file.
type kubeconfig struct {
	Clusters []struct {
		Name    string    `json:"name"`
		Cluster kcCluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Exec *kcExec `json:"exec"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

type kcCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string `json:"certificate-authority"`
	CertificateAuthorityData []byte `json:"certificate-authority-data"`
	ProxyURL                 string `json:"proxy-url"`
	DisableCompression       bool   `json:"disable-compression"`
	Extensions               []struct {
		Name      string          `json:"name"`
		Extension json.RawMessage `json:"extension"`
	} `json:"extensions"`
	dir string // the directory of the file that defined it
}

type kcExec struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	ProvideClusterInfo bool   `json:"provideClusterInfo"`
	dir                string // the absolute directory of the file that defined it
}

// path is the block's command as client-go runs it: a relative path with a directory in it
// (bin/plugin, ./plugin) is relative to the kubeconfig file that defined the block, not to
// the agent's working directory; a bare name is left to PATH.
func (e *kcExec) path() string {
	if e.dir == "" || filepath.IsAbs(e.Command) || !strings.ContainsRune(e.Command, filepath.Separator) {
		return e.Command
	}
	return filepath.Join(e.dir, e.Command)
}

// named is what the workstation's kubeconfig names and the agent will run: a plugin, the
// environment its exec block adds, and the cluster it is told of (nil unless the block
// has provideClusterInfo).
type named struct {
	User    string // the kubeconfig user whose exec block names it
	Command string
	Args    []string
	Env     []string
	Cluster *wire.Cluster
	// Kuberc is the file an exec-cache block's --kuberc names: one more policy the plugin
	// must pass, as it must when the block runs on the workstation.
	Kuberc string
}

// same reports whether n and o run the same: command, arguments, environment, cluster and
// policy.
func (n *named) same(o *named) bool {
	return n.Command == o.Command && slices.Equal(n.Args, o.Args) && slices.Equal(n.Env, o.Env) && reflect.DeepEqual(n.Cluster, o.Cluster) && n.Kuberc == o.Kuberc
}

// agentConfig is the merged kubeconfig the agent serves from.
type agentConfig struct {
	users    map[string]*kcExec
	contexts map[string][2]string // name: cluster, user
	clusters map[string]kcCluster
	files    []string
}

// kubeconfigPaths is where the agent reads the kubeconfig, as kubectl does: the files
// KUBECONFIG lists, else ~/.kube/config.
func kubeconfigPaths(environ []string) ([]string, error) {
	if v := lookupEnv(environ, "KUBECONFIG"); v != "" {
		var paths []string
		for p := range strings.SplitSeq(v, string(os.PathListSeparator)) {
			if p != "" && !slices.Contains(paths, p) {
				paths = append(paths, p)
			}
		}
		return paths, nil
	}
	home := lookupEnv(environ, "HOME")
	if home == "" {
		home = lookupEnv(environ, "USERPROFILE")
	}
	if home == "" {
		return nil, errors.New("neither KUBECONFIG nor HOME is set, so the agent has no kubeconfig to read")
	}
	return []string{filepath.Join(home, ".kube", "config")}, nil
}

// loadAgentConfig reads the workstation's kubeconfig. Files KUBECONFIG lists that do not
// exist are skipped, as kubectl skips them; none at all is an error.
func loadAgentConfig(environ []string) (*agentConfig, error) {
	paths, err := kubeconfigPaths(environ)
	if err != nil {
		return nil, err
	}
	c := &agentConfig{users: map[string]*kcExec{}, contexts: map[string][2]string{}, clusters: map[string]kcCluster{}}
	for _, path := range paths {
		b, err := privdir.ReadLinked(path, maxKubeconfig)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig %s: %w", path, err)
		}
		var kc kubeconfig
		if err := yaml.Unmarshal(b, &kc); err != nil {
			return nil, fmt.Errorf("reading the kubeconfig %s: %w", path, err)
		}
		c.files = append(c.files, path)
		dir, err := filepath.Abs(filepath.Dir(path))
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig %s: %w", path, err)
		}
		for _, u := range kc.Users {
			if _, ok := c.users[u.Name]; !ok {
				if u.User.Exec != nil {
					u.User.Exec.dir = dir
				}
				c.users[u.Name] = u.User.Exec
			}
		}
		for _, x := range kc.Contexts {
			if _, ok := c.contexts[x.Name]; !ok {
				c.contexts[x.Name] = [2]string{x.Context.Cluster, x.Context.User}
			}
		}
		for _, x := range kc.Clusters {
			if _, ok := c.clusters[x.Name]; !ok {
				x.Cluster.dir = filepath.Dir(path)
				c.clusters[x.Name] = x.Cluster
			}
		}
	}
	if len(c.files) == 0 {
		return nil, fmt.Errorf("no kubeconfig: %s does not exist", strings.Join(paths, ", "))
	}
	return c, nil
}

// wrappedBy returns the command line an exec block names: what follows -- for an
// exec-cache block (kplug-exec-cache, or kplug exec-cache), else its own command and args
// (own is then true: its command is the block's, which client-go resolves). An exec-cache
// block that asks an agent itself, or has no command, names nothing.
func wrappedBy(e *kcExec) (line []string, own, ok bool) {
	if e == nil || e.Command == "" {
		return nil, false, false
	}
	base := strings.TrimSuffix(filepath.Base(e.Command), ".exe")
	args := e.Args
	switch {
	case base == "kplug-exec-cache":
	case base == "kplug" && len(args) > 0 && args[0] == "exec-cache":
		args = args[1:]
	default:
		return append([]string{e.Command}, e.Args...), true, true
	}
	i := slices.Index(args, "--")
	if i < 0 || i == len(args)-1 {
		return nil, false, false
	}
	for _, a := range args[:i] {
		if a == "--agent" || strings.HasPrefix(a, "--agent=") || a == "--serve" || strings.HasPrefix(a, "--serve=") {
			return nil, false, false
		}
	}
	return args[i+1:], false, true
}

// kubercFlag is the value of the last --kuberc before an exec-cache block's --, as the
// block's exec-cache would parse it, or "".
func kubercFlag(args []string) string {
	value := ""
	for i := 0; i < len(args) && args[i] != "--"; i++ {
		switch a := args[i]; {
		case a == "--kuberc" && i+1 < len(args):
			value = args[i+1]
			i++
		case strings.HasPrefix(a, "--kuberc="):
			value = strings.TrimPrefix(a, "--kuberc=")
		}
	}
	return value
}

// find returns what the kubeconfig names for command and args, asked for by a client of
// the given cluster (nil when its exec block has no provideClusterInfo). A plugin given
// cluster information is served only for a cluster a context pairs it with, and is told
// of the workstation's cluster, never of one the remote describes.
func (c *agentConfig) find(command string, args []string, remote *wire.Cluster) (*named, error) {
	want := append([]string{command}, args...)
	var servers []string
	var found []*named
	for _, user := range sortedKeys(c.users) {
		e := c.users[user]
		line, own, ok := wrappedBy(e)
		if !ok || !slices.Equal(line, want) {
			continue
		}
		// The remote names the line as the kubeconfig writes it; what runs is the file
		// kubectl would run for it here.
		n := &named{User: user, Command: line[0], Args: line[1:]}
		if !own {
			n.Kuberc = kubercFlag(e.Args)
			if n.Kuberc != "" && !filepath.IsAbs(n.Kuberc) {
				return nil, fmt.Errorf("the workstation's exec block of user %s gives --kuberc %s, a relative path the agent cannot resolve as exec-cache would (from its client's working directory): make it absolute", user, n.Kuberc)
			}
		}
		if own {
			n.Command = e.path()
		} else if !filepath.IsAbs(n.Command) && strings.ContainsRune(n.Command, filepath.Separator) {
			// exec-cache runs such a line from its client's working directory; the agent
			// has none to share, and its own is wherever it was started.
			return nil, fmt.Errorf("the workstation's kubeconfig names %s by a relative path, which the agent does not run: name it by an absolute path or by a name in PATH", n.Command)
		}
		for _, v := range e.Env {
			n.Env = append(n.Env, v.Name+"="+v.Value)
		}
		if !e.ProvideClusterInfo {
			found = append(found, n)
			continue
		}
		var candidates []string
		for _, ctx := range sortedKeys(c.contexts) {
			if x := c.contexts[ctx]; x[1] == user {
				if _, ok := c.clusters[x[0]]; ok && !slices.Contains(candidates, x[0]) {
					candidates = append(candidates, x[0])
				}
			}
		}
		for _, name := range candidates {
			cl := c.clusters[name]
			servers = append(servers, cl.Server)
			if (remote != nil && cl.Server == remote.Server) || (remote == nil && len(candidates) == 1) {
				wc, err := cl.execCluster()
				if err != nil {
					return nil, fmt.Errorf("cluster %q of the workstation's kubeconfig: %w", name, err)
				}
				n.Cluster = wc
				found = append(found, n)
				break
			}
		}
	}
	shown := strings.Join(append([]string{command}, redactArgs(args)...), " ")
	if len(found) > 0 {
		// The remote sends the line, not the environment its block sets: blocks that name
		// the same line but run it differently (AWS_PROFILE=dev and =prod, a relative
		// command of two files) cannot be told apart, and either's credential could be the
		// other's.
		var users []string
		alike := true
		for _, n := range found {
			users = append(users, n.User)
			alike = alike && found[0].same(n)
		}
		if !alike {
			return nil, fmt.Errorf("the workstation's kubeconfig names %s in several exec blocks (users %s) that run it differently (env, path or cluster), and the agent cannot tell which one the remote means: give the workstation's blocks different command lines, or the agent a kubeconfig of its own", shown, strings.Join(users, ", "))
		}
		return found[0], nil
	}
	if len(servers) > 0 {
		asked := "no cluster (its exec block has no provideClusterInfo, and several clusters use it here)"
		if remote != nil {
			asked = remote.Server
		}
		slices.Sort(servers)
		return nil, fmt.Errorf("the workstation's kubeconfig names %s for %s, not for %s", shown, strings.Join(slices.Compact(servers), ", "), asked)
	}
	return nil, fmt.Errorf("the workstation's kubeconfig (%s) names no exec plugin %q: the agent runs only what its exec blocks name", strings.Join(c.files, ", "), shown)
}

// execCluster is the cluster as client-go gives it to a plugin (spec.cluster).
func (k kcCluster) execCluster() (*wire.Cluster, error) {
	wc := &wire.Cluster{
		Server: k.Server, TLSServerName: k.TLSServerName, InsecureSkipTLSVerify: k.InsecureSkipTLSVerify,
		CertificateAuthorityData: k.CertificateAuthorityData, ProxyURL: k.ProxyURL, DisableCompression: k.DisableCompression,
	}
	if len(wc.CertificateAuthorityData) == 0 && k.CertificateAuthority != "" {
		path := k.CertificateAuthority
		if !filepath.IsAbs(path) {
			path = filepath.Join(k.dir, path)
		}
		b, err := privdir.ReadLinked(path, maxKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading certificate-authority: %w", err)
		}
		wc.CertificateAuthorityData = b
	}
	for _, x := range k.Extensions {
		if x.Name == execExtension {
			wc.Config = x.Extension
		}
	}
	return wc, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
