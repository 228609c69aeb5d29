package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/kplug/kplug/httpsig"
	"github.com/kplug/kplug/internal/testkit/poll"
	"github.com/kplug/kplug/test/e2e/framework"
)

// TestSecuritySignatureProxyImpersonationLines (issue 27 review of N2, F6): a signer
// allowed to impersonate any user and group signs a request with two Impersonate-Group
// lines; kube-apiserver behind kplug signature-proxy acts with both groups. An
// intermediary merges the lines into "g1, g2", which RFC 9421 signs the same: the real
// kube-apiserver used to act with the one group "g1, g2"; the proxy now refuses the
// request (400) and forwards nothing.
func TestSecuritySignatureProxyImpersonationLines(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{}}})
	signingCA, key, certFile := newSigningIdentity(t, cp, "frank")
	cert := readCertificate(t, certFile)
	proxy := startSignatureProxy(t, cp, signingCA.File)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"create", "clusterrole", "impersonate-any", "--verb=impersonate", "--resource=users,groups"},
		{"create", "clusterrolebinding", "signers-impersonate-any", "--clusterrole=impersonate-any", "--group=signers"},
	} {
		if out, err := cp.Kubectl(ctx, cp.Admin, args...).CombinedOutput(); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	roots := cp.PKI.ClusterCA.Pool()
	impersonate := http.Header{"Impersonate-User": {"viewer"}, "Impersonate-Group": {"g1", "g2"}}

	code, user, msg := whoami(t, signingClient(t, key, cert, roots, nil, nil), proxy.URL, impersonate)
	if code != http.StatusCreated || user.Username != "viewer" || !slices.Equal(user.Groups, []string{"g1", "g2", "system:authenticated"}) {
		t.Fatalf("as signed: %d %+v %s; want viewer in g1, g2", code, user, msg)
	}
	merge := func(r *http.Request) {
		r.Header["Impersonate-Group"] = []string{strings.Join(r.Header.Values("Impersonate-Group"), ", ")}
	}
	code, user, msg = whoami(t, signingClient(t, key, cert, roots, merge, nil), proxy.URL, impersonate)
	const want = `signature proxy: the Impersonate-Group value "g1, g2" holds a comma`
	if code != http.StatusBadRequest || !strings.HasPrefix(msg, want) {
		t.Errorf("merged by an intermediary: %d %+v %q; want 400 %q...", code, user, msg, want)
	}
}

// TestSecuritySignatureProxyAuditSourceIPs (issue 27 review of N2, F7): kube-apiserver
// records in its audit log the source addresses it reads from X-Forwarded-For and
// X-Real-Ip, then the peer's. A signer connecting to kplug signature-proxy from 127.0.0.2
// sends X-Real-Ip: 6.6.6.6 and X-Forwarded-For: 7.7.7.7 (uncovered). The real
// kube-apiserver's audit event used to say ["6.6.6.6", "127.0.0.1"]: the address the
// client chose, then the proxy's, never the client's. It now says the client's address,
// then the proxy's.
func TestSecuritySignatureProxyAuditSourceIPs(t *testing.T) {
	if !canBindLoopback2(t) {
		t.Skip("127.0.0.2 is not a local address here; the client must come from an address other than the proxy's")
	}
	dir := t.TempDir()
	policy, auditLog := filepath.Join(dir, "audit-policy.yaml"), filepath.Join(dir, "audit.log")
	writeBytes(t, policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{
		Flags: []string{"--audit-policy-file=" + policy, "--audit-log-path=" + auditLog},
	}}})
	signingCA, key, certFile := newSigningIdentity(t, cp, "grace")
	cert := readCertificate(t, certFile)
	proxy := startSignatureProxy(t, cp, signingCA.File)

	auditID := fmt.Sprintf("kplug-e2e-source-ips-%d", time.Now().UnixNano())
	spoof := func(r *http.Request) {
		r.Header.Set("X-Real-Ip", "6.6.6.6")
		r.Header.Set("X-Forwarded-For", "7.7.7.7")
	}
	c := signingClientFrom(t, key, cert, cp.PKI.ClusterCA.Pool(), "127.0.0.2", spoof)
	if code, user, msg := whoami(t, c, proxy.URL, http.Header{"Audit-Id": {auditID}}); code != http.StatusCreated || user.Username != "sig:grace" {
		t.Fatalf("signed whoami: %d %+v %s", code, user, msg)
	}
	var event struct {
		AuditID   string   `json:"auditID"`
		Stage     string   `json:"stage"`
		SourceIPs []string `json:"sourceIPs"`
		User      struct {
			Username string `json:"username"`
		} `json:"user"`
	}
	poll.Until(t, "the request's audit event", func() bool {
		f, err := os.Open(auditLog)
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), auditID) && json.Unmarshal(sc.Bytes(), &event) == nil && event.AuditID == auditID && event.Stage == "ResponseComplete" {
				return true
			}
		}
		return false
	})
	if want := []string{"127.0.0.2", "127.0.0.1"}; !slices.Equal(event.SourceIPs, want) || event.User.Username != "sig:grace" {
		t.Errorf("audit event: sourceIPs %q, user %q; want %q, sig:grace", event.SourceIPs, event.User.Username, want)
	}
}

// canBindLoopback2 reports whether a client can connect from 127.0.0.2 (Linux routes all
// of 127/8 to loopback; macOS has only 127.0.0.1 unless configured).
func canBindLoopback2(t *testing.T) bool {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.2:0")
	if err != nil {
		return false
	}
	_ = ln.Close()
	return true
}

// signingClientFrom is signingClient connecting from the local address from, with tamper
// applied after signing.
func signingClientFrom(t *testing.T, key *ecdsa.PrivateKey, cert *x509.Certificate, roots *x509.CertPool, from string, tamper func(*http.Request)) *http.Client {
	t.Helper()
	signer, err := httpsig.NewSigner(httpsig.SignerOptions{
		Key:     httpsig.Key{Signer: key, Certificate: cert},
		Headers: map[string]string{httpsig.AudienceHeader: signatureAudience},
	})
	if err != nil {
		t.Fatal(err)
	}
	base := &http.Transport{
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}
	t.Cleanup(base.CloseIdleConnections)
	return &http.Client{Transport: signer.RoundTripper(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		tamper(r)
		return base.RoundTrip(r)
	}))}
}

// TestSecuritySignatureProxyRequestHeaderNames (issue 27 review of N2, F2): the real
// kube-apiserver runs with one more group header than kplug's default
// (--requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups), so it puts anyone
// named in a front-proxy request into the groups of X-Forwarded-Groups too. A signer
// adds an unsigned X-Forwarded-Groups: system:masters to a signed request: the proxy
// used to remove only X-Remote-* and forward it, making the signer cluster-admin. Now
// the proxy forwards nothing until it has read the names kube-apiserver publishes: without
// the RBAC of docs/signature-proxy-rbac.yaml it answers 503 and says what to grant; once
// granted, it finds X-Forwarded-Groups, which it does not remove, and exits saying so. At
// no time is the signer system:masters. Given the same names
// (--requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups) it removes them all
// and serves the signer as themself.
func TestSecuritySignatureProxyRequestHeaderNames(t *testing.T) {
	cp := framework.StartForTest(t, framework.Options{Servers: []framework.ServerOptions{{
		Flags: []string{"--requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups"},
	}}})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	signingCA, key, certFile := newSigningIdentity(t, cp, "heidi")
	cert := readCertificate(t, certFile)
	roots := cp.PKI.ClusterCA.Pool()
	forged := http.Header{"X-Forwarded-Groups": {"system:masters"}}

	// What kube-apiserver does with the extra name, behind the front-proxy certificate.
	proxyCert, err := tls.LoadX509KeyPair(cp.PKI.ProxyClient.CertFile, cp.PKI.ProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	front := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{proxyCert}, MinVersion: tls.VersionTLS12}}}
	if _, user, msg := whoami(t, front, cp.Servers[0].URL, http.Header{"X-Remote-User": {"heidi"}, "X-Forwarded-Groups": {"system:masters"}}); !slices.Contains(user.Groups, "system:masters") {
		t.Fatalf("kube-apiserver did not read X-Forwarded-Groups, so this test shows nothing: %+v %s", user, msg)
	}

	t.Run("default names", func(t *testing.T) {
		proxy := startSignatureProxyUngranted(t, cp, signingCA.File)
		const unchecked = "signature proxy: not forwarding until it has read which identity headers kube-apiserver reads from front proxies"
		granted, refusals := false, 0
		for {
			select {
			case <-proxy.done:
			case <-ctx.Done():
				t.Fatalf("kplug signature-proxy is still running beside a kube-apiserver that reads X-Forwarded-Groups:\n%s", proxy.log.String())
			case <-time.After(200 * time.Millisecond):
				code, user, msg := whoamiOrError(t, signingClient(t, key, cert, roots, nil, nil), proxy.URL, forged)
				if slices.Contains(user.Groups, "system:masters") {
					t.Fatalf("through kplug signature-proxy, heidi's X-Forwarded-Groups made her system:masters: %d %+v", code, user)
				}
				if code != 0 && !granted {
					if code != http.StatusServiceUnavailable || msg != unchecked {
						t.Errorf("without the RBAC to read the names: %d %q; want 503 %q", code, msg, unchecked)
					}
					refusals++
				}
				const why = "the user kplug-signature-proxy, which the proxy asserts in X-Remote-User with its front-proxy client certificate, may not get ConfigMap kube-system/extension-apiserver-authentication: bind it to the Role extension-apiserver-authentication-reader in kube-system (docs/signature-proxy-rbac.yaml)"
				if !granted && strings.Contains(proxy.log.String(), why) {
					grantSignatureProxy(t, cp)
					granted = true
				}
				continue
			}
			break
		}
		const refused = "verifier: the request-header names in ConfigMap kube-system/extension-apiserver-authentication have --requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups, but kplug signature-proxy sets and removes only X-Remote-Group"
		if log := proxy.log.String(); !granted || refusals == 0 || proxy.code == 0 || !strings.Contains(log, refused) {
			t.Errorf("kplug signature-proxy exited %d (RBAC granted: %v, after %d requests answered 503); want 503 until granted, then it to refuse %q:\n%s", proxy.code, granted, refusals, refused, log)
		}
	})

	t.Run("the same names", func(t *testing.T) {
		proxy := startSignatureProxy(t, cp, signingCA.File, "--requestheader-group-headers=X-Remote-Group,X-Forwarded-Groups")
		code, user, msg := whoami(t, signingClient(t, key, cert, roots, nil, nil), proxy.URL, forged)
		// (The framework's --requestheader-group-headers=X-Remote-Group and this test's add
		// up: kube-apiserver reads X-Remote-Group twice and lists "signers" twice.)
		if code != http.StatusCreated || user.Username != "sig:heidi" || !slices.Contains(user.Groups, "signers") || slices.Contains(user.Groups, "system:masters") {
			t.Errorf("signed, with a forged X-Forwarded-Groups: %d %+v %s; want sig:heidi in signers, not system:masters", code, user, msg)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, proxy.URL+"/api/v1/namespaces/kube-system/secrets", nil)
		req.Header = forged.Clone()
		resp, err := signingClient(t, key, cert, roots, nil, nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("kube-system secrets with a forged X-Forwarded-Groups: %d; want 403", resp.StatusCode)
		}
	})
}

// whoamiOrError is whoami, with code 0 where the request could not be sent (the proxy not
// listening yet, or gone).
func whoamiOrError(t *testing.T, c *http.Client, base string, header http.Header) (int, authenticationv1.UserInfo, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+selfSubjectReviewPath, strings.NewReader(selfSubjectReview))
	req.Header = header.Clone()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, authenticationv1.UserInfo{}, err.Error()
	}
	return decodeReview(t, resp)
}
