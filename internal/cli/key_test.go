package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
		{"denied", csr("", cond(certificatesv1.CertificateDenied, "KubectlDeny", "not on a laptop")), "denied (KubectlDeny): not on a laptop"},
		{"failed", csr("", approved, cond(certificatesv1.CertificateFailed, "SignerFailed", "no key")), "the signer failed (SignerFailed): no key"},
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
