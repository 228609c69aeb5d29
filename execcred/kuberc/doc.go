// Package kuberc reads the credential plugin policy of kubectl's kuberc file and applies it
// as client-go 1.35 and later do, so that a program running exec credential plugins (kplug's
// runtime, `kplug exec-cache`) runs exactly the plugins kubectl would run.
//
// The pieces, in the order a program uses them:
//
//   - Locate and Load find the file as kubectl 1.36 does: an explicit path (kubectl's
//     --kuberc flag), else $KUBERC, else ~/.kube/kuberc; KUBERC=off turns it off. The
//     caller passes those values in (Options); the package reads no environment.
//   - Decode picks the Preference from the file's YAML documents (kubectl.config.k8s.io
//     v1beta1 or v1alpha1) as kubectl does, with credentialPluginPolicy and
//     credentialPluginAllowlist (entries' command, or the deprecated name).
//   - Policy.Validate refuses what client-go refuses, and Policy.Check decides, before each
//     run, whether a plugin command may run, with client-go's error messages (and, for an
//     allowlist kubectl kuberc set left beside another policy, what to do about it).
//
// The package imports only the standard library and the two small YAML and JSON
// libraries kubectl's own decoder is built on, so that a program that starts for every
// credential (`kplug exec-cache`) can afford it.
package kuberc
