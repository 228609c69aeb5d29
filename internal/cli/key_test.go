package cli

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kplug/kplug/internal/testkit/testpki"
)

// TestWaitForCertificate: what kplug key request-certificate says for each state the
// cluster may leave a request in.
func TestWaitForCertificate(t *testing.T) {
	t.Parallel()
	csr := func(cert string, conds ...certificatesv1.CertificateSigningRequestCondition) *certificatesv1.CertificateSigningRequest {
		return &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "alice-tpm"},
			Status: certificatesv1.CertificateSigningRequestStatus{Conditions: conds, Certificate: []byte(cert)}}
	}
	cond := func(typ certificatesv1.RequestConditionType, reason, msg string) certificatesv1.CertificateSigningRequestCondition {
		return certificatesv1.CertificateSigningRequestCondition{Type: typ, Reason: reason, Message: msg}
	}
	approved := cond(certificatesv1.CertificateApproved, "KubectlApprove", "")
	for _, tc := range []struct {
		name string
		csr  *certificatesv1.CertificateSigningRequest
		want string // error, or "" for the certificate "CERT"
	}{
		{"issued", csr("CERT", approved), ""},
		{"denied", csr("", cond(certificatesv1.CertificateDenied, "KubectlDeny", "not on a laptop")), `denied ("KubectlDeny"): "not on a laptop"`},
		{"failed", csr("", approved, cond(certificatesv1.CertificateFailed, "SignerFailed", "no key")), `the signer failed ("SignerFailed"): "no key"`},
		{"pending", csr(""), "not approved within 50ms: ask your admin to run kubectl certificate approve alice-tpm, then run this again with --name alice-tpm"},
		{"approved, never issued", csr("", approved), "approved, but no certificate issued within 50ms: is kube-controller-manager's csrsigning controller running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cert, err := waitForCertificate(t.Context(), func(context.Context) (*certificatesv1.CertificateSigningRequest, error) {
				return tc.csr, nil
			}, 50*time.Millisecond)
			switch {
			case tc.want == "" && (err != nil || string(cert) != "CERT"):
				t.Errorf("got %q, %v; want the certificate", cert, err)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
				t.Errorf("got %v; want %q", err, tc.want)
			}
		})
	}
}

// TestSecurityCheckIssued is N4 of the issue 30 second review: a hostile or compromised
// API server answered a CertificateSigningRequest with a certificate for system:masters,
// an expired one, a server certificate, or a certificate followed by a key and a script,
// and kplug wrote each where the running proxy would pick it up.
func TestSecurityCheckIssued(t *testing.T) {
	t.Parallel()
	ca := testpki.NewTestCA(t, "issuer")
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	issue := func(cn string, groups []string, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) []byte {
		path, err := ca.IssueForPeriod(cn+"-"+string(rune('a'+usage)), &x509.Certificate{
			Subject: pkix.Name{CommonName: cn, Organization: groups}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}, key.Public(), notBefore, notAfter)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	want := subjectOptions{user: "alice", groups: []string{"tpm-users", "dev"}}
	good := issue("alice", []string{"dev", "tpm-users"}, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour))
	for _, tc := range []struct {
		name string
		b    []byte
		err  string
	}{
		{"good, groups in another order", good, ""},
		{"another user", issue("system:admin", []string{"system:masters"}, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour)),
			`the issued certificate is for user "system:admin" in groups ["system:masters"], not the user "alice" in groups ["tpm-users" "dev"] asked for`},
		{"a group fewer", issue("alice", []string{"dev"}, x509.ExtKeyUsageClientAuth, now.Add(-time.Minute), now.Add(time.Hour)), `not the user "alice"`},
		{"expired", issue("alice", []string{"dev", "tpm-users"}, x509.ExtKeyUsageClientAuth, now.Add(-2*time.Hour), now.Add(-time.Hour)), "not now"},
		{"server auth", issue("alice", []string{"dev", "tpm-users"}, x509.ExtKeyUsageServerAuth, now.Add(-time.Minute), now.Add(time.Hour)), "not for client authentication"},
		{"a key after it", append(bytes.Clone(good), []byte("-----BEGIN EC PRIVATE KEY-----\nMAA=\n-----END EC PRIVATE KEY-----\n")...), "something other than PEM certificates"},
		{"a script after it", append(bytes.Clone(good), []byte("#!/bin/sh\nrm -rf ~\n")...), "something other than PEM certificates"},
		{"nothing", nil, "the issued certificate is empty"},
	} {
		x, chain, err := checkIssued(tc.b, key.Public(), want, now)
		switch {
		case tc.err == "" && (err != nil || x.Subject.CommonName != "alice" || !bytes.Equal(chain, good)):
			t.Errorf("%s: %v, %q", tc.name, err, chain)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: %v; want %q", tc.name, err, tc.err)
		}
	}
}

// TestSecurityCertificateTarget is N5 of the issue 30 second review: --cert-file naming
// the key file replaced the TPM key file with the certificate, and the key was lost.
func TestSecurityCertificateTarget(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	key := filepath.Join(dir, "alice.tss2")
	if err := os.WriteFile(key, []byte("-----BEGIN TSS2 PRIVATE KEY-----\nMAA=\n-----END TSS2 PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kp, err := testpki.NewTestCA(t, "ca").IssueClient("alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkCertificateTarget(key); err == nil || !strings.Contains(err.Error(), "exists and holds something other than PEM certificates (a key?)") {
		t.Errorf("the key file as --cert-file: %v", err)
	}
	for _, ok := range []string{kp.CertFile, filepath.Join(dir, "new.crt")} {
		if err := checkCertificateTarget(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	// Through the command, the refusal comes before any key or cluster is touched.
	code, _, errOut := run(t, "key", "request-certificate", key, "--user", "alice", "--cert-file", key)
	if code != ExitUsage || !strings.Contains(errOut, "a key?") {
		t.Errorf("request-certificate --cert-file KEY: %d %q", code, errOut)
	}
	if b, _ := os.ReadFile(key); !strings.HasPrefix(string(b), "-----BEGIN TSS2 PRIVATE KEY-----") {
		t.Error("the key file was changed")
	}
}
