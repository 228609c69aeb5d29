package verifier

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	authenticationv1 "k8s.io/api/authentication/v1"
)

// celCostLimit bounds one evaluation, as kube-apiserver bounds its authentication
// configuration's expressions, so that no configured expression stalls a request.
const celCostLimit = 1_000_000

// The two CEL environments: certificate rules and claim mappings read `cert`; user
// validation rules read `user`.
var (
	certEnv = mustEnv("cert")
	userEnv = mustEnv("user")
)

func mustEnv(variable string) *cel.Env {
	env, err := cel.NewEnv(cel.Variable(variable, cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		panic(err) // the declarations above are fixed
	}
	return env
}

// rule is a compiled validation rule: the expression must evaluate to true.
type rule struct {
	prog    cel.Program
	message string
}

// mapping is a compiled claimMappings.
type mapping struct {
	username, groups, uid cel.Program
	extra                 []extraMapping
}

type extraMapping struct {
	key  string
	prog cel.Program
}

func compile(env *cel.Env, path, expr string, want ...*cel.Type) (cel.Program, error) {
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("%s: required", path)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s: compiling %q: %w", path, expr, iss.Err())
	}
	out := ast.OutputType()
	ok := out.IsExactType(cel.DynType)
	for _, w := range want {
		ok = ok || out.IsExactType(w)
	}
	if !ok {
		return nil, fmt.Errorf("%s: %q evaluates to %s, want %s", path, expr, out, typeNames(want))
	}
	prog, err := env.Program(ast, cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return prog, nil
}

func typeNames(ts []*cel.Type) string {
	names := make([]string, len(ts))
	for i, t := range ts {
		names[i] = t.String()
	}
	return strings.Join(names, " or ")
}

func compileRules(path string, specs []ruleSpec, env *cel.Env) ([]rule, error) {
	out := make([]rule, 0, len(specs))
	for i, s := range specs {
		p := fmt.Sprintf("%s[%d]", path, i)
		prog, err := compile(env, p+".expression", s.Expression, cel.BoolType)
		if err != nil {
			return nil, err
		}
		msg := s.Message
		if msg == "" {
			msg = "failed the rule " + s.Expression
		}
		out = append(out, rule{prog: prog, message: msg})
	}
	return out, nil
}

func compileMapping(path string, m claimMappings) (mapping, error) {
	var out mapping
	var err error
	stringOrList := []*cel.Type{cel.StringType, cel.ListType(cel.StringType), cel.ListType(cel.DynType)}
	if out.username, err = compile(certEnv, path+".username.expression", m.Username.Expression, cel.StringType); err != nil {
		return out, err
	}
	if m.Groups.Expression != "" {
		if out.groups, err = compile(certEnv, path+".groups.expression", m.Groups.Expression, stringOrList...); err != nil {
			return out, err
		}
	}
	if m.UID.Expression != "" {
		if out.uid, err = compile(certEnv, path+".uid.expression", m.UID.Expression, cel.StringType); err != nil {
			return out, err
		}
	}
	keys := map[string]bool{}
	for i, e := range m.Extra {
		p := fmt.Sprintf("%s.extra[%d]", path, i)
		if err := checkExtraKey(e.Key); err != nil {
			return out, fmt.Errorf("%s.key: %w", p, err)
		}
		if keys[e.Key] {
			return out, fmt.Errorf("%s.key: %q is mapped twice", p, e.Key)
		}
		keys[e.Key] = true
		prog, err := compile(certEnv, p+".valueExpression", e.ValueExpression, stringOrList...)
		if err != nil {
			return out, err
		}
		out.extra = append(out.extra, extraMapping{key: e.Key, prog: prog})
	}
	return out, nil
}

// checkExtraKey applies kube-apiserver's rule for extra keys of its authentication
// configuration: a lowercase, domain-prefixed path outside the domains Kubernetes keeps.
func checkExtraKey(key string) error {
	domain, _, ok := strings.Cut(key, "/")
	switch {
	case key == "":
		return errors.New("required")
	case key != strings.ToLower(key):
		return fmt.Errorf("%q is not lowercase", key)
	case !ok || domain == "":
		return fmt.Errorf("%q is not a domain-prefixed path (example.com/name)", key)
	case domain == "kubernetes.io" || domain == "k8s.io" || strings.HasSuffix(domain, ".kubernetes.io") || strings.HasSuffix(domain, ".k8s.io"):
		return fmt.Errorf("%q is under a domain Kubernetes reserves", key)
	}
	return nil
}

// certVariable is what the expressions see as `cert`.
func certVariable(c *x509.Certificate) map[string]any {
	uris := make([]string, len(c.URIs))
	for i, u := range c.URIs {
		uris[i] = u.String()
	}
	ips := make([]string, len(c.IPAddresses))
	for i, ip := range c.IPAddresses {
		ips[i] = ip.String()
	}
	return map[string]any{
		"subject":      nameVariable(c.Subject),
		"issuer":       nameVariable(c.Issuer),
		"serialNumber": c.SerialNumber.String(),
		"notBefore":    c.NotBefore,
		"notAfter":     c.NotAfter,
		"dnsSANs":      nonNil(c.DNSNames),
		"emailSANs":    nonNil(c.EmailAddresses),
		"uriSANs":      uris,
		"ipSANs":       ips,
	}
}

func nameVariable(n pkix.Name) map[string]any {
	return map[string]any{
		"commonName":         n.CommonName,
		"serialNumber":       n.SerialNumber,
		"organization":       nonNil(n.Organization),
		"organizationalUnit": nonNil(n.OrganizationalUnit),
		"country":            nonNil(n.Country),
		"province":           nonNil(n.Province),
		"locality":           nonNil(n.Locality),
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// userVariable is what userValidationRules see as `user`.
func userVariable(u *authenticationv1.UserInfo) map[string]any {
	extra := make(map[string][]string, len(u.Extra))
	for k, v := range u.Extra {
		extra[k] = v
	}
	return map[string]any{"username": u.Username, "uid": u.UID, "groups": nonNil(u.Groups), "extra": extra}
}

func eval(prog cel.Program, vars map[string]any) (ref.Val, error) {
	v, _, err := prog.Eval(vars)
	return v, err
}

// check runs rules in order; the first that fails names its message.
func check(rules []rule, vars map[string]any) error {
	for _, r := range rules {
		v, err := eval(r.prog, vars)
		if err != nil {
			return fmt.Errorf("%s: %w", r.message, err)
		}
		if b, ok := v.(types.Bool); !ok || !bool(b) {
			return errors.New(r.message)
		}
	}
	return nil
}

// user runs the claim mappings on a certificate.
func (m *mapping) user(vars map[string]any) (*authenticationv1.UserInfo, error) {
	u := &authenticationv1.UserInfo{}
	v, err := eval(m.username, vars)
	if err != nil {
		return nil, fmt.Errorf("username mapping: %w", err)
	}
	if u.Username, err = asString(v); err != nil || u.Username == "" {
		return nil, fmt.Errorf("username mapping: %s", orEmpty(err))
	}
	if m.uid != nil {
		if v, err = eval(m.uid, vars); err != nil {
			return nil, fmt.Errorf("uid mapping: %w", err)
		}
		if u.UID, err = asString(v); err != nil {
			return nil, fmt.Errorf("uid mapping: %w", err)
		}
	}
	if m.groups != nil {
		if v, err = eval(m.groups, vars); err != nil {
			return nil, fmt.Errorf("groups mapping: %w", err)
		}
		if u.Groups, err = asStrings(v); err != nil {
			return nil, fmt.Errorf("groups mapping: %w", err)
		}
	}
	for _, e := range m.extra {
		if v, err = eval(e.prog, vars); err != nil {
			return nil, fmt.Errorf("extra %q mapping: %w", e.key, err)
		}
		values, err := asStrings(v)
		if err != nil {
			return nil, fmt.Errorf("extra %q mapping: %w", e.key, err)
		}
		if len(values) > 0 {
			if u.Extra == nil {
				u.Extra = map[string]authenticationv1.ExtraValue{}
			}
			u.Extra[e.key] = values
		}
	}
	return u, nil
}

func orEmpty(err error) string {
	if err != nil {
		return err.Error()
	}
	return "evaluates to an empty string"
}

func asString(v ref.Val) (string, error) {
	s, ok := v.(types.String)
	if !ok {
		return "", fmt.Errorf("evaluates to %s, want string", v.Type().TypeName())
	}
	return string(s), nil
}

// asStrings accepts a string (one value) or a list of strings; empty strings are
// dropped, as kube-apiserver drops them from groups.
func asStrings(v ref.Val) ([]string, error) {
	if s, ok := v.(types.String); ok {
		if s == "" {
			return nil, nil
		}
		return []string{string(s)}, nil
	}
	if v == types.NullValue {
		return nil, nil
	}
	native, err := v.ConvertToNative(reflect.TypeFor[[]string]())
	if err != nil {
		return nil, fmt.Errorf("evaluates to %s, want a string or a list of strings", v.Type().TypeName())
	}
	var out []string
	for _, s := range native.([]string) {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}
