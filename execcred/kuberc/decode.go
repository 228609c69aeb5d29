package kuberc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// The kuberc API group and the versions kubectl 1.36 reads.
const (
	Group    = "kubectl.config.k8s.io"
	V1alpha1 = Group + "/v1alpha1"
	V1beta1  = Group + "/v1beta1"
)

// Preference is what kplug takes from a kuberc Preference document: its credential
// plugin policy. kubectl's defaults and aliases are checked for their types (a document
// whose fields have the wrong types is skipped, as kubectl skips it) but not kept.
type Preference struct {
	// APIVersion is the document's, V1beta1 or V1alpha1.
	APIVersion string
	// Policy is credentialPluginPolicy and credentialPluginAllowlist (v1beta1 only; a
	// v1alpha1 document has neither and allows every plugin). It is not validated.
	Policy Policy
	// Document is the position of the document used in the file, 1 for the first.
	Document int
	// Ignored lists the unknown and duplicate fields of that document, which kubectl
	// ignores with a warning (a misspelt credentialPluginPolicy is one).
	Ignored []string
}

// Decode returns the Preference kubectl 1.36 would use from the contents of a kuberc
// file: the first document, of the YAML documents separated by "---" lines, that decodes
// as a Preference of V1beta1 or V1alpha1. Keys are case-sensitive; unknown and duplicate
// fields are ignored (and listed in Ignored); a document that does not decode (not YAML,
// another kind, fields of the wrong type, an allowlist entry whose command and deprecated
// name differ) is skipped. It returns nil, nil when data holds no document, and an error
// when no document is usable, saying why for each.
func Decode(data []byte) (*Preference, error) {
	docs, err := documents(data)
	if err != nil {
		return nil, err
	}
	var skipped []string
	for i, doc := range docs {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		pref, err := decodeDocument(doc)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("document %d: %v", i+1, err))
			continue
		}
		pref.Document = i + 1
		return pref, nil
	}
	if len(skipped) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("no valid preferences found: %s", strings.Join(skipped, "; "))
}

// documents splits data into YAML documents as kubectl's reader does: lines (CRLF read as
// LF) that start with "---" end a document, and may only be followed by spaces or a
// comment; one that starts a document is part of it.
func documents(data []byte) ([][]byte, error) {
	var docs [][]byte
	var doc bytes.Buffer
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
			line = bytes.TrimSuffix(line, []byte("\r"))
		} else {
			data = nil
		}
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			if trimmed := strings.TrimSpace(string(rest)); trimmed != "" && trimmed[0] != '#' {
				return nil, fmt.Errorf("invalid Yaml document separator: %s", trimmed)
			}
			if doc.Len() > 0 {
				docs = append(docs, bytes.Clone(doc.Bytes()))
				doc.Reset()
				continue
			}
			// A separator that opens a document stays in it, as in kubectl's reader.
		}
		doc.Write(line)
		doc.WriteByte('\n')
	}
	if doc.Len() > 0 {
		docs = append(docs, doc.Bytes())
	}
	return docs, nil
}

// The versioned Preference types, with kubectl's field names and types (named, for
// readable type errors).
type (
	optionDefault struct {
		Name    string `json:"name"`
		Default string `json:"default"`
	}
	commandDefaults struct {
		Command string          `json:"command"`
		Options []optionDefault `json:"options"`
	}
	alias struct {
		Name        string          `json:"name"`
		Command     string          `json:"command"`
		PrependArgs []string        `json:"prependArgs,omitempty"`
		AppendArgs  []string        `json:"appendArgs,omitempty"`
		Options     []optionDefault `json:"options,omitempty"`
	}
	allowlistEntry struct {
		Name    string `json:"name,omitempty"` // deprecated in 1.36
		Command string `json:"command,omitempty"`
	}
	v1beta1Preference struct {
		APIVersion                string            `json:"apiVersion,omitempty"`
		Kind                      string            `json:"kind,omitempty"`
		Defaults                  []commandDefaults `json:"defaults"`
		Aliases                   []alias           `json:"aliases"`
		CredentialPluginPolicy    string            `json:"credentialPluginPolicy,omitempty"`
		CredentialPluginAllowlist []allowlistEntry  `json:"credentialPluginAllowlist,omitempty"`
	}
	v1alpha1Override struct {
		Command string          `json:"command"`
		Flags   []optionDefault `json:"flags"`
	}
	v1alpha1Alias struct {
		Name        string          `json:"name"`
		Command     string          `json:"command"`
		PrependArgs []string        `json:"prependArgs,omitempty"`
		AppendArgs  []string        `json:"appendArgs,omitempty"`
		Flags       []optionDefault `json:"flags,omitempty"`
	}
	v1alpha1Preference struct {
		APIVersion string             `json:"apiVersion,omitempty"`
		Kind       string             `json:"kind,omitempty"`
		Overrides  []v1alpha1Override `json:"overrides"`
		Aliases    []v1alpha1Alias    `json:"aliases"`
	}
)

// decodeDocument decodes one document as apimachinery's universal decoder does for
// kubectl's scheme: JSON when it starts with '{', YAML otherwise; apiVersion and kind
// found first (case-insensitively, as apimachinery does), then the fields
// case-sensitively, strict errors kept apart.
func decodeDocument(doc []byte) (*Preference, error) {
	data, isJSON := doc, bytes.HasPrefix(bytes.TrimLeftFunc(doc, unicode.IsSpace), []byte("{"))
	if !isJSON {
		var err error
		if data, err = yaml.YAMLToJSON(doc); err != nil {
			return nil, err
		}
	}
	var meta struct {
		APIVersion string `json:"apiVersion,omitempty"`
		Kind       string `json:"kind,omitempty"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, fmt.Errorf("not a mapping but %s", typeErr.Value)
		}
		return nil, fmt.Errorf("not JSON (a document that starts with { must be): %w", err)
	}
	group, version, err := parseGroupVersion(meta.APIVersion)
	switch {
	case err != nil:
		return nil, err
	case meta.Kind == "":
		return nil, errors.New("no kind")
	case version == "":
		return nil, errors.New("no apiVersion")
	case group != Group || meta.Kind != "Preference" || version != "v1beta1" && version != "v1alpha1":
		return nil, fmt.Errorf("kind %q of apiVersion %q is not a Preference of %s or %s", meta.Kind, meta.APIVersion, V1beta1, V1alpha1)
	}
	pref := &Preference{APIVersion: Group + "/" + version}
	if !isJSON {
		// Duplicate keys the YAML-to-JSON conversion above let through (the last won).
		if _, err := yaml.YAMLToJSONStrict(doc); err != nil {
			pref.Ignored = append(pref.Ignored, err.Error())
		}
	}
	if version == "v1alpha1" {
		var v v1alpha1Preference
		strict, err := kjson.UnmarshalStrict(data, &v)
		if err != nil {
			return nil, err
		}
		pref.Ignored = appendErrors(pref.Ignored, strict)
		return pref, nil
	}
	var v v1beta1Preference
	strict, err := kjson.UnmarshalStrict(data, &v)
	if err != nil {
		return nil, err
	}
	pref.Ignored = appendErrors(pref.Ignored, strict)
	pref.Policy.Type = PolicyType(v.CredentialPluginPolicy)
	if v.CredentialPluginAllowlist != nil {
		pref.Policy.Allowlist = make([]AllowlistEntry, len(v.CredentialPluginAllowlist))
	}
	for i, e := range v.CredentialPluginAllowlist {
		// kubectl's conversion: command, or the deprecated name; both only if equal.
		switch {
		case e.Name != "" && e.Command != "" && e.Name != e.Command:
			return nil, fmt.Errorf("credentialPluginAllowlist entry #%d: both `Name` and `Command` were supplied with different values. `Name` is deprecated, use `Command` instead", i+1)
		case e.Command != "":
			pref.Policy.Allowlist[i].Command = e.Command
		default:
			pref.Policy.Allowlist[i].Command = e.Name
		}
	}
	return pref, nil
}

// parseGroupVersion splits an apiVersion as apimachinery does.
func parseGroupVersion(gv string) (group, version string, err error) {
	if gv == "" || gv == "/" {
		return "", "", nil
	}
	switch strings.Count(gv, "/") {
	case 0:
		return "", gv, nil
	case 1:
		group, version, _ = strings.Cut(gv, "/")
		return group, version, nil
	}
	return "", "", fmt.Errorf("unexpected GroupVersion string: %v", gv)
}

func appendErrors(s []string, errs []error) []string {
	for _, err := range errs {
		s = append(s, err.Error())
	}
	return s
}
