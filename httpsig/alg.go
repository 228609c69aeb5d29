package httpsig

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// The algorithms of the profile (KEP-6308 "Signature-Input and Signature"), by their names
// in the IANA HTTP Signature Algorithms registry (RFC 9421 §6.2.2).
const (
	algECDSAP256 = "ecdsa-p256-sha256"
	algECDSAP384 = "ecdsa-p384-sha384"
	algEd25519   = "ed25519"
	algRSAPSS    = "rsa-pss-sha512"
	algHMAC      = "hmac-sha256"
)

// RSA key sizes a signer may use and a verifier accepts: the floor is the profile's, the
// ceiling bounds what an unauthenticated caller can make a verifier compute (KEP-6308
// "Risks and Mitigations").
const (
	minRSABits = 2048
	maxRSABits = 8192
	// minSecretBytes is the shortest HMAC key accepted: SHA-256's output size, the least
	// RFC 2104 §3 recommends.
	minSecretBytes = 32
	// pssSaltLength is RFC 9421 §3.3.1's salt length for rsa-pss-sha512.
	pssSaltLength = 64
)

// algorithmFor returns the alg of an asymmetric public key, or an error naming a key the
// profile does not allow.
func algorithmFor(pub crypto.PublicKey) (string, error) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return algECDSAP256, nil
		case elliptic.P384():
			return algECDSAP384, nil
		}
		return "", fmt.Errorf("ECDSA key on curve %s is not allowed (P-256 or P-384)", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return algEd25519, nil
	case *rsa.PublicKey:
		if n := k.N.BitLen(); n < minRSABits || n > maxRSABits {
			return "", fmt.Errorf("RSA key of %d bits is not allowed (%d to %d)", n, minRSABits, maxRSABits)
		}
		return algRSAPSS, nil
	case nil:
		return "", errors.New("no public key")
	}
	return "", fmt.Errorf("key type %T is not allowed (ECDSA P-256 or P-384, Ed25519, RSA)", pub)
}

// knownAlgorithm reports whether alg is one of the profile's algorithms.
func knownAlgorithm(alg string) bool {
	switch alg {
	case algECDSAP256, algECDSAP384, algEd25519, algRSAPSS, algHMAC:
		return true
	}
	return false
}

// signBase signs an RFC 9421 signature base with alg (RFC 9421 §3.3). key is a
// crypto.Signer, possibly in hardware, or the HMAC secret; ECDSA signatures come back in
// the fixed-size r||s form the RFC requires, whatever form the signer returns.
func signBase(alg string, key any, rand io.Reader, base []byte) ([]byte, error) {
	if alg == algHMAC {
		secret, ok := key.([]byte)
		if !ok {
			return nil, fmt.Errorf("%s needs a secret, not %T", alg, key)
		}
		m := hmac.New(sha256.New, secret)
		m.Write(base)
		return m.Sum(nil), nil
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s needs a private key, not %T", alg, key)
	}
	switch alg {
	case algEd25519:
		return s.Sign(rand, base, crypto.Hash(0))
	case algRSAPSS:
		d := sha512.Sum512(base)
		return s.Sign(rand, d[:], &rsa.PSSOptions{SaltLength: pssSaltLength, Hash: crypto.SHA512})
	case algECDSAP256, algECDSAP384:
		h, size := ecdsaParams(alg)
		d := digest(h, base)
		sig, err := s.Sign(rand, d, h)
		if err != nil {
			return nil, err
		}
		return fixedECDSA(sig, size)
	}
	return nil, fmt.Errorf("unknown algorithm %q", alg)
}

// verifyBase checks sig over base with alg and key: a crypto.PublicKey, or []byte for
// hmac-sha256. The key must be of alg's type (RFC 9421 §7.3.6: a key is refused under an
// algorithm its holder did not intend).
func verifyBase(alg string, key any, base, sig []byte) error {
	if alg == algHMAC {
		secret, ok := key.([]byte)
		if !ok || len(secret) == 0 {
			return fmt.Errorf("alg %q needs a shared secret, but the key is %s", alg, keyKind(key))
		}
		m := hmac.New(sha256.New, secret)
		m.Write(base)
		if !hmac.Equal(m.Sum(nil), sig) {
			return errors.New("signature does not verify")
		}
		return nil
	}
	if _, ok := key.([]byte); ok {
		return fmt.Errorf("alg %q needs a public key, but the key is a shared secret", alg)
	}
	keyAlg, err := algorithmFor(key)
	if err != nil {
		return err
	}
	if keyAlg != alg {
		return fmt.Errorf("alg %q does not fit the key, which is %s", alg, keyKind(key))
	}
	ok := false
	switch k := key.(type) {
	case ed25519.PublicKey:
		ok = ed25519.Verify(k, base, sig)
	case *rsa.PublicKey:
		d := sha512.Sum512(base)
		ok = rsa.VerifyPSS(k, crypto.SHA512, d[:], sig, &rsa.PSSOptions{SaltLength: pssSaltLength, Hash: crypto.SHA512}) == nil
	case *ecdsa.PublicKey:
		h, size := ecdsaParams(alg)
		if len(sig) == 2*size {
			r := new(big.Int).SetBytes(sig[:size])
			s := new(big.Int).SetBytes(sig[size:])
			ok = ecdsa.Verify(k, digest(h, base), r, s)
		}
	}
	if !ok {
		return errors.New("signature does not verify")
	}
	return nil
}

// keyKind names a key's type for an error, never its value.
func keyKind(key any) string {
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		return "an ECDSA " + k.Curve.Params().Name + " key"
	case ed25519.PublicKey:
		return "an Ed25519 key"
	case *rsa.PublicKey:
		return fmt.Sprintf("an RSA %d-bit key", k.N.BitLen())
	case []byte:
		return "a shared secret"
	}
	return fmt.Sprintf("of type %T", key)
}

func ecdsaParams(alg string) (crypto.Hash, int) {
	if alg == algECDSAP384 {
		return crypto.SHA384, 48
	}
	return crypto.SHA256, 32
}

func digest(h crypto.Hash, b []byte) []byte {
	d := h.New()
	d.Write(b)
	return d.Sum(nil)
}

// fixedECDSA turns an ECDSA signature into r||s, each left-padded to size bytes (RFC 9421
// §3.3.4, §3.3.5). Go's keys and PKCS#11 through crypto11 return ASN.1 DER; a signer that
// already returns r||s is passed through.
func fixedECDSA(sig []byte, size int) ([]byte, error) {
	if len(sig) == 2*size && sig[0] != 0x30 {
		return sig, nil
	}
	var rs struct{ R, S *big.Int }
	rest, err := asn1.Unmarshal(sig, &rs)
	if err != nil || len(rest) != 0 || rs.R == nil || rs.S == nil || rs.R.Sign() <= 0 || rs.S.Sign() <= 0 {
		if len(sig) == 2*size {
			return sig, nil
		}
		return nil, fmt.Errorf("ECDSA signer returned %d bytes that are neither ASN.1 nor r||s", len(sig))
	}
	if rs.R.BitLen() > 8*size || rs.S.BitLen() > 8*size {
		return nil, errors.New("ECDSA signer returned a signature too large for its curve")
	}
	out := make([]byte, 2*size)
	rs.R.FillBytes(out[:size])
	rs.S.FillBytes(out[size:])
	return out, nil
}
