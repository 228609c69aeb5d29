package httpsig

import (
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/dunglas/httpsfv"
)

// Length caps, applied to the raw fields before any parsing allocates in proportion to
// them (KEP-6308 "Verification order", step 1). One signature in the profile needs under
// 1 KiB of Signature-Input and, with an RSA-8192 key, 1.4 KiB of Signature.
const (
	// maxFieldBytes bounds Signature-Input, and separately Signature: all field lines
	// together.
	maxFieldBytes = 8 << 10
	// maxSignatures bounds the labels of Signature-Input, and the field lines of either.
	maxSignatures = 16
	// maxComponents bounds one signature's covered components.
	maxComponents = 64
	// maxCertificateBytes bounds CertificateHeader: a leaf's DER in base64, with room.
	maxCertificateBytes = 16 << 10
)

// Policy is the verifier's half of the profile: what every accepted signature must
// satisfy whoever made it (KEP-6308 "Server configuration", "Verification order").
type Policy struct {
	// RequiredHeaders maps a header name to the values accepted for it; every signature
	// must cover each and, where the list is non-empty, carry one of the values exactly.
	// AudienceHeader is required present and covered whether or not it is named here;
	// naming it (with a non-empty list) also pins its value (KEP-6308 "Test Plan": the
	// audience "is refused when absent even though no operator named it, and an entry
	// for it with an empty accepted list fails configuration validation").
	RequiredHeaders map[string][]string
	// MaxAge is how old a created timestamp may be; zero means one minute.
	MaxAge time.Duration
	// MaxClockSkew is added to MaxAge, and is how far in the future created may be;
	// zero means five seconds.
	MaxClockSkew time.Duration
	// Now is the verifier's clock; nil means time.Now.
	Now func() time.Time
}

// Validate reports a Policy that breaks a rule of KEP-6308 "Required signed headers":
// AudienceHeader, if named, with a non-empty list; no reserved or invalid header names,
// no name twice, no empty accepted value, and no negative durations.
func (p Policy) Validate() error {
	seen := map[string]string{}
	for name, values := range p.RequiredHeaders {
		lower := strings.ToLower(name)
		switch {
		case !isToken(name):
			return fmt.Errorf("httpsig: required header %q is not a valid header name", name)
		case IsReservedHeader(name):
			return fmt.Errorf("httpsig: required header %q is reserved (KEP-6308 \"Required signed headers\")", name)
		case seen[lower] != "":
			return fmt.Errorf("httpsig: required header %q is named twice (also as %q)", name, seen[lower])
		}
		seen[lower] = name
		for _, v := range values {
			if v == "" {
				return fmt.Errorf("httpsig: required header %q lists an empty value", name)
			}
		}
		if lower == strings.ToLower(AudienceHeader) {
			if len(values) == 0 {
				return fmt.Errorf("httpsig: required header %s needs at least one accepted value naming this cluster", AudienceHeader)
			}
		}
	}
	if p.MaxAge < 0 || p.MaxClockSkew < 0 {
		return errors.New("httpsig: maxAge and maxClockSkew must not be negative")
	}
	return nil
}

// namesAudience reports whether p names AudienceHeader (and so pins its values).
func (p Policy) namesAudience() bool {
	for name := range p.RequiredHeaders {
		if strings.EqualFold(name, AudienceHeader) {
			return true
		}
	}
	return false
}

func (p Policy) withDefaults() Policy {
	if p.MaxAge == 0 {
		p.MaxAge = time.Minute
	}
	if p.MaxClockSkew == 0 {
		p.MaxClockSkew = 5 * time.Second
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	return p
}

// Signature is one signature of a request, parsed and checked against a Policy but
// not yet verified with a key.
type Signature struct {
	Label, KeyID, Algorithm, Nonce, Tag string
	Created                             time.Time
	// Components are the covered component identifiers, in order.
	Components []string
	// Certificate is the leaf from CertificateHeader, set only when KeyID is a
	// certificate keyid whose digest matches those bytes. With VerifyOptions.Leaves it is
	// shared with other requests that sent the same bytes: resolve must not modify it.
	Certificate *x509.Certificate
}

// Outcome classifies why a request was refused, for metrics and logs (KEP-6308 "Metrics").
type Outcome string

// Outcomes of Verify, in verification order: when several signatures are refused, the
// error carries the outcome of the one that got furthest.
const (
	Accepted   Outcome = "accepted"
	Malformed  Outcome = "malformed"   // unparsable, over the length caps, or a required parameter absent or wrong
	Stale      Outcome = "stale"       // created outside MaxAge+MaxClockSkew
	Uncovered  Outcome = "uncovered"   // floor, body or protected header rule broken
	Required   Outcome = "required"    // a required signed header absent, uncovered or not accepted
	UnknownKey Outcome = "unknown_key" // resolve refused the key, or the certificate does not match the keyid
	Forged     Outcome = "forged"      // the signature or the body digest does not verify
)

var outcomeOrder = []Outcome{Malformed, Stale, Uncovered, Required, UnknownKey, Forged}

func rank(o Outcome) int {
	for i, x := range outcomeOrder {
		if x == o {
			return i
		}
	}
	return -1
}

// Error is a refused request: the outcome, and a message that names what and why
// without any secret or signature bytes.
type Error struct {
	Outcome Outcome
	Err     error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func refuse(o Outcome, format string, a ...any) *Error {
	return &Error{Outcome: o, Err: fmt.Errorf(format, a...)}
}

// Verify checks the request's signatures in KEP-6308 "Verification order" and returns
// the first that is accepted (a request may carry several under different labels;
// KEP-6308 "Signature-Input and Signature"). resolve returns the key for a parsed and
// policy-checked signature: a crypto.PublicKey, or []byte for hmac-sha256; its error
// refuses that signature. resolve should return only a key it trusts (for a certificate,
// one that chains to an anchor): the body, if any, is read (up to MaxBodyBytes) once a
// signature has verified under the key resolve returned, checked against the covered
// Content-Digest and put back, and a verifier should buffer nothing for a client it has
// not authenticated. Verify does not remove the signature headers; the caller does once
// it has accepted the identity.
//
// A refused request gives an *Error; an invalid Policy, or a BodyReserver's refusal to
// hold the body, gives a plain error.
func Verify(req *http.Request, p Policy, resolve func(*Signature) (any, error)) (*Signature, error) {
	v, err := VerifyRequest(req, p, resolve, VerifyOptions{})
	if err != nil {
		return nil, err
	}
	return v.Signature, nil
}

// VerifyOptions are what a verifier that checks many requests keeps between them. The
// zero value keeps nothing.
type VerifyOptions struct {
	// Leaves remembers the certificates parsed from CertificateHeader; nil parses the
	// leaf of every request.
	Leaves *LeafCache
}

// Verified is a request VerifyRequest accepted.
type Verified struct {
	// Signature is the accepted signature.
	Signature *Signature
	// Inputs are the members of Signature-Input in order, accepted or not, from the one
	// parse the check made: a caller that needs what every signature covers, or how many
	// the request carries, need not parse the field again.
	Inputs []Input
}

// Input is one member of Signature-Input as received: its label and the components it
// names that are strings. Only the accepted signature's were checked.
type Input struct {
	Label      string
	Components []string
}

// VerifyRequest is Verify, with what o keeps between requests, and it returns every
// member of Signature-Input beside the accepted signature. Its checks and errors are
// Verify's.
func VerifyRequest(req *http.Request, p Policy, resolve func(*Signature) (any, error), o VerifyOptions) (*Verified, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	p = p.withDefaults()
	sigs, err := parseFields(req.Header)
	if err != nil {
		return nil, err
	}
	v := verification{req: req, policy: p, resolve: resolve, leaves: o.Leaves}
	var refused []*Error
	for _, s := range sigs {
		sig, err := v.one(s)
		if v.abort != nil {
			return nil, v.abort
		}
		if err == nil {
			return &Verified{Signature: sig, Inputs: inputsOf(sigs, sig)}, nil
		}
		refused = append(refused, err)
	}
	return nil, joinRefusals(refused)
}

// ParseInputs parses Signature-Input, for a caller that has not had VerifyRequest parse
// it; it applies none of Verify's checks. A header without the field gives none.
func ParseInputs(h http.Header) ([]Input, error) {
	lines := h.Values("Signature-Input")
	if len(lines) == 0 {
		return nil, nil
	}
	d, err := httpsfv.UnmarshalDictionary(lines)
	if err != nil {
		return nil, fmt.Errorf("httpsig: Signature-Input is not a structured field dictionary: %w", err)
	}
	out := make([]Input, 0, len(d.Names()))
	for _, label := range d.Names() {
		m, _ := d.Get(label)
		il, _ := m.(httpsfv.InnerList)
		out = append(out, Input{Label: label, Components: stringItems(il)})
	}
	return out, nil
}

// inputsOf are the members of Signature-Input as parseFields found them; accepted's
// components, already collected, are shared.
func inputsOf(sigs []received, accepted *Signature) []Input {
	out := make([]Input, len(sigs))
	for i, r := range sigs {
		out[i].Label = r.label
		if r.label == accepted.Label {
			out[i].Components = accepted.Components
			continue
		}
		out[i].Components = stringItems(r.input)
	}
	return out
}

// stringItems are the items of il that are strings, in order.
func stringItems(il httpsfv.InnerList) []string {
	var out []string
	for _, it := range il.Items {
		if c, ok := it.Value.(string); ok {
			out = append(out, c)
		}
	}
	return out
}

// maxRefusalsSaid bounds the refusals the error of a request with several signatures
// spells out; the others are counted. A client chooses how many signatures it sends, and
// the error is logged and sent back.
const maxRefusalsSaid = 3

// joinRefusals is the error of a request none of whose signatures was accepted: the first
// maxRefusalsSaid refusals, and the outcome of the one that got furthest.
func joinRefusals(refused []*Error) *Error {
	if len(refused) == 1 {
		return refused[0]
	}
	out := &Error{Outcome: refused[0].Outcome}
	var msgs []string
	for i, r := range refused {
		if i < maxRefusalsSaid {
			msgs = append(msgs, r.Error())
		}
		if rank(r.Outcome) > rank(out.Outcome) {
			out.Outcome = r.Outcome
		}
	}
	if more := len(refused) - len(msgs); more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", more))
	}
	out.Err = fmt.Errorf("httpsig: none of %d signatures accepted: %s", len(refused), strings.Join(msgs, "; "))
	return out
}

// received is one label's Signature-Input member and signature bytes.
type received struct {
	label string
	input httpsfv.InnerList
	sig   []byte
	err   *Error // set when this label alone is malformed
}

// parseFields parses Signature-Input and Signature under the length caps.
func parseFields(h http.Header) ([]received, error) {
	in, sg := h.Values("Signature-Input"), h.Values("Signature")
	if len(in) == 0 || len(sg) == 0 {
		return nil, refuse(Malformed, "httpsig: the request needs both Signature-Input and Signature")
	}
	for name, lines := range map[string][]string{"Signature-Input": in, "Signature": sg} {
		if n := totalLen(lines); n > maxFieldBytes || len(lines) > maxSignatures {
			return nil, refuse(Malformed, "httpsig: %s has %d bytes in %d lines; at most %d bytes and %d lines are accepted", name, n, len(lines), maxFieldBytes, maxSignatures)
		}
	}
	inputs, err := httpsfv.UnmarshalDictionary(in)
	if err != nil {
		return nil, refuse(Malformed, "httpsig: Signature-Input is not a structured field dictionary: %v", err)
	}
	sigs, err := httpsfv.UnmarshalDictionary(sg)
	if err != nil {
		return nil, refuse(Malformed, "httpsig: Signature is not a structured field dictionary: %v", err)
	}
	labels := inputs.Names()
	if len(labels) == 0 {
		return nil, refuse(Malformed, "httpsig: Signature-Input names no signature")
	}
	if len(labels) > maxSignatures {
		return nil, refuse(Malformed, "httpsig: Signature-Input has %d signatures; at most %d are accepted", len(labels), maxSignatures)
	}
	out := make([]received, 0, len(labels))
	for _, label := range labels {
		r := received{label: label}
		m, _ := inputs.Get(label)
		il, ok := m.(httpsfv.InnerList)
		sm, found := sigs.Get(label)
		item, isItem := sm.(httpsfv.Item)
		b, isBytes := item.Value.([]byte)
		switch {
		case !ok:
			r.err = refuse(Malformed, "signature %s: Signature-Input member is not an inner list", Quote(label))
		case !found:
			r.err = refuse(Malformed, "signature %s: Signature has no member of that label", Quote(label))
		case !isItem || !isBytes:
			r.err = refuse(Malformed, "signature %s: Signature member is not a byte sequence", Quote(label))
		}
		r.input, r.sig = il, b
		out = append(out, r)
	}
	return out, nil
}

func totalLen(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l)
	}
	return n
}

// verification is one Verify call: the request, the policy, and the body once read.
type verification struct {
	req      *http.Request
	policy   Policy
	resolve  func(*Signature) (any, error)
	leaves   *LeafCache // nil: parse every leaf
	bodyRead bool
	body     *heldBody
	bodyErr  error
	abort    error // a BodyReserver's refusal: Verify stops with it
}

// one checks one signature in KEP-6308 "Verification order".
func (v *verification) one(r received) (*Signature, *Error) {
	if r.err != nil {
		return nil, r.err
	}
	fail := func(o Outcome, format string, a ...any) (*Signature, *Error) {
		return nil, refuse(o, "signature %s: "+format, append([]any{Quote(r.label)}, a...)...)
	}
	// 1. Parameters and components.
	sig, err := parseSignature(r)
	if err != nil {
		return fail(Malformed, "%v", err)
	}
	// 2. Age, before anything costs.
	now := v.policy.Now()
	if age := now.Sub(sig.Created); age > v.policy.MaxAge+v.policy.MaxClockSkew {
		return fail(Stale, "created %s ago, more than maxAge %s plus maxClockSkew %s", age.Round(time.Second), v.policy.MaxAge, v.policy.MaxClockSkew)
	} else if -age > v.policy.MaxClockSkew {
		return fail(Stale, "created %s in the future, more than maxClockSkew %s", (-age).Round(time.Second), v.policy.MaxClockSkew)
	}
	if exp, ok := r.input.Params.Get("expires"); ok {
		e, isInt := exp.(int64)
		if !isInt {
			return fail(Malformed, "expires is not an integer")
		}
		if now.After(time.Unix(e, 0).Add(v.policy.MaxClockSkew)) {
			return fail(Stale, "expired %s ago", now.Sub(time.Unix(e, 0)).Round(time.Second))
		}
	}
	// 3. Coverage.
	if o, err := v.coverage(sig.Components); err != nil {
		return fail(o, "%v", err)
	}
	params, err := signatureParams(sig.Components, r.input)
	if err != nil {
		return fail(Malformed, "Signature-Input cannot be serialized: %v", err)
	}
	base, err := signatureBase(v.req, sig.Components, params)
	if err != nil {
		return fail(Forged, "%v", err)
	}
	// 4. The key.
	var rememberLeaf func()
	if strings.HasPrefix(sig.KeyID, CertificateKeyIDPrefix) {
		cert, remember, err := certificate(v.req.Header, sig.KeyID, v.leaves, now)
		if err != nil {
			return fail(UnknownKey, "%v", err)
		}
		sig.Certificate, rememberLeaf = cert, remember
	}
	key, err := v.resolve(sig)
	if err != nil {
		return fail(UnknownKey, "key %s: %v", Quote(sig.KeyID), err)
	}
	// 5. The signature, then the body it covers by digest.
	if err := verifyBase(sig.Algorithm, key, base, r.sig); err != nil {
		return fail(Forged, "key %s: %v", Quote(sig.KeyID), err)
	}
	if dv := v.req.Header.Values(contentDigestHeader); len(dv) > 0 {
		body, err := v.readBody()
		if err != nil {
			if re := (*reserveError)(nil); errors.As(err, &re) {
				v.abort = re.err
			}
			return fail(Malformed, "%v", err)
		}
		if err := checkContentDigest(dv, body); err != nil {
			return fail(Forged, "%v", err)
		}
	}
	if rememberLeaf != nil {
		rememberLeaf()
	}
	return sig, nil
}

// signatureParams serializes a received Signature-Input member for the @signature-params
// line (RFC 9421 §2.3) as httpsfv.Marshal does, with the signer's serializer where every
// parameter is an integer or a string (the profile's, and what clients send): components
// are strings without parameters (parseSignature checked), and parsed strings are
// printable ASCII. Any other parameter goes through httpsfv.
func signatureParams(components []string, il httpsfv.InnerList) (string, error) {
	names := il.Params.Names()
	ps := make([]param, 0, len(names))
	for _, name := range names {
		v, _ := il.Params.Get(name)
		switch v.(type) {
		case int64, string:
			ps = append(ps, param{name: name, value: v})
		default:
			return httpsfv.Marshal(il)
		}
	}
	return serializeParams(components, ps), nil
}

// parseSignature checks the parameters every signature carries (KEP-6308 "Signature-Input
// and Signature") and the covered components.
func parseSignature(r received) (*Signature, error) {
	sig := &Signature{Label: r.label}
	if n := len(r.input.Items); n > maxComponents {
		return nil, fmt.Errorf("covers %d components; at most %d are accepted", n, maxComponents)
	}
	for _, it := range r.input.Items {
		c, ok := it.Value.(string)
		if !ok {
			return nil, errors.New("a covered component is not a string")
		}
		if len(it.Params.Names()) > 0 {
			return nil, fmt.Errorf("component %s has parameters, which the profile does not use", Quote(c))
		}
		if contains(sig.Components, c) {
			return nil, fmt.Errorf("component %s is covered twice", Quote(c))
		}
		sig.Components = append(sig.Components, c)
	}
	created, ok := r.input.Params.Get("created")
	if !ok {
		return nil, errors.New("created is missing")
	}
	secs, isInt := created.(int64)
	if !isInt {
		return nil, errors.New("created is not an integer")
	}
	sig.Created = time.Unix(secs, 0)
	for _, p := range []struct {
		name string
		dst  *string
	}{{"nonce", &sig.Nonce}, {"alg", &sig.Algorithm}, {"tag", &sig.Tag}, {"keyid", &sig.KeyID}} {
		v, ok := r.input.Params.Get(p.name)
		if !ok {
			return nil, fmt.Errorf("%s is missing", p.name)
		}
		s, isString := v.(string)
		if !isString || s == "" {
			return nil, fmt.Errorf("%s is not a non-empty string", p.name)
		}
		*p.dst = s
	}
	switch {
	case sig.Tag != Tag:
		return nil, fmt.Errorf("tag is %s, not %q", Quote(sig.Tag), Tag)
	case !knownAlgorithm(sig.Algorithm):
		return nil, fmt.Errorf("alg %s is not one of %s, %s, %s, %s, %s", Quote(sig.Algorithm), algECDSAP256, algECDSAP384, algEd25519, algRSAPSS, algHMAC)
	case len(sig.KeyID) > maxKeyIDBytes:
		return nil, fmt.Errorf("keyid has %d bytes; at most %d are accepted", len(sig.KeyID), maxKeyIDBytes)
	case len(sig.Nonce) > maxKeyIDBytes:
		return nil, fmt.Errorf("nonce has %d bytes; at most %d are accepted", len(sig.Nonce), maxKeyIDBytes)
	}
	return sig, nil
}

// coverage checks KEP-6308 "What a signature covers" against the request: the floor, the
// body rule, the protected headers present, and the required signed headers.
func (v *verification) coverage(components []string) (Outcome, error) {
	for _, c := range Floor {
		if !contains(components, c) {
			return Uncovered, fmt.Errorf("does not cover %s, which every signature must", c)
		}
	}
	h := v.req.Header
	hasBody := v.req.Body != nil && v.req.Body != http.NoBody && v.req.ContentLength != 0
	if (hasBody || len(h.Values(contentDigestHeader)) > 0) && !contains(components, "content-digest") {
		if hasBody {
			return Uncovered, errors.New("the request has a body but the signature does not cover content-digest")
		}
		return Uncovered, errors.New("the request has a Content-Digest the signature does not cover")
	}
	// Unsorted, as the map gives them, and sorted only to name the first uncovered one:
	// sorting every request's header names showed in the verifier's profile.
	var uncovered []string
	for name := range h {
		if IsProtectedHeader(name) && !contains(components, strings.ToLower(name)) {
			uncovered = append(uncovered, name)
		}
	}
	if len(uncovered) > 0 {
		return Uncovered, fmt.Errorf("the request has %s, which the signature does not cover", slices.Min(uncovered))
	}
	if !v.policy.namesAudience() {
		if err := requiredHeader(h, components, AudienceHeader, nil); err != nil {
			return Required, err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.policy.RequiredHeaders)) {
		if err := requiredHeader(h, components, name, v.policy.RequiredHeaders[name]); err != nil {
			return Required, err
		}
	}
	return "", nil
}

func requiredHeader(h http.Header, components []string, name string, accepted []string) error {
	value, ok := fieldValue(h, strings.ToLower(name))
	if !ok {
		return fmt.Errorf("required header %s is absent", name)
	}
	if !contains(components, strings.ToLower(name)) {
		return fmt.Errorf("required header %s is not covered", name)
	}
	if len(accepted) > 0 && !contains(accepted, value) {
		return fmt.Errorf("required header %s has a value this server does not accept", name)
	}
	return nil
}

// readBody reads the request body once for every signature that needs it.
func (v *verification) readBody() (*heldBody, error) {
	if !v.bodyRead {
		v.body, v.bodyErr = readBody(v.req)
		v.bodyRead = true
	}
	return v.body, v.bodyErr
}
