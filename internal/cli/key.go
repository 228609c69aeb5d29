package cli

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kplug/kplug/internal/privdir"
	"github.com/kplug/kplug/internal/proxyplugin"
	"github.com/kplug/kplug/keys"
)

// kubeAPIServerClientSigner is the built-in signer of client certificates that
// kube-apiserver accepts (kube-controller-manager signs with the cluster's client CA).
const kubeAPIServerClientSigner = "kubernetes.io/kube-apiserver-client"

func newKeyCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Create a key in the TPM, and get a client certificate and a kubeconfig for it",
		Long: `Keys that never leave hardware, from start to kubectl with kplug alone:

  1. kplug key create     creates a signing key in the TPM 2.0 and writes its TSS2 key
                          file, which is useless without this TPM
  2. kplug key request-certificate
                          asks the cluster for a client certificate for the key (a
                          CertificateSigningRequest for kubernetes.io/kube-apiserver-client);
                          your cluster admin approves it
  3. kplug key kubeconfig writes a kubeconfig whose user authenticates with the key
                          through kplug proxy-plugin; use it with kplug run

KEY, in every command but create, is what --client-key and --sign-key take: a PEM key file,
a TPM 2.0 TSS2 key file, a tpm: URI or a pkcs11: URI. kplug never writes out a private key.
The TPM is $KPLUG_TPM_DEVICE, else /dev/tpmrm0; a key's auth value comes from its URI's
pin-source=file:PATH or $KPLUG_TPM_PIN.`,
		Example: `  kplug key create ~/.kube/kplug/alice.tss2
  kplug key request-certificate ~/.kube/kplug/alice.tss2 --user alice --cert-file ~/.kube/kplug/alice.crt
  kplug key kubeconfig ~/.kube/kplug/alice.tss2 --cert-file ~/.kube/kplug/alice.crt --out ~/.kube/alice.yaml
  kplug run --kubeconfig ~/.kube/alice.yaml -- kubectl auth whoami`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newKeyCreateCommand(g), newKeyPublicCommand(g), newKeyCSRCommand(g),
		newKeyRequestCertificateCommand(g), newKeyKubeconfigCommand(g))
	return cmd
}

func newKeyCreateCommand(g *globals) *cobra.Command {
	var o keys.TPMKeyOptions
	cmd := &cobra.Command{
		Use:   "create KEYFILE",
		Short: "Create a signing key in the TPM 2.0 and write its TSS2 key file",
		Long: `Create a signing key in the TPM 2.0 and write its key file (-----BEGIN TSS2 PRIVATE
KEY-----, the format tpm2-openssl writes), mode 0600. An existing file is never replaced.

The key is created under the TPM's standard storage root key, which the TPM derives again
from its own seed whenever the key is used, so the TPM keeps nothing and the key file is
all there is to keep (back it up like any file: it is useless without this TPM). The TPM
marks the key fixedTPM and fixedParent: it refuses to export or duplicate it, and the key
file holds its private part only encrypted to this TPM's storage root key.

With --pin-source the key gets an auth value (a PIN) that every use must give, and wrong
ones count towards the TPM's dictionary-attack lockout.`,
		Example: `  kplug key create ~/.kube/kplug/alice.tss2
  kplug key create --algorithm rsa-2048 --pin-source ~/.kube/kplug/pin ~/.kube/kplug/alice.tss2
  KPLUG_TPM_DEVICE=/dev/tpm0 kplug key create alice.tss2`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("pin-source") && o.PINSource == "" {
				return &usageError{err: errors.New("--pin-source is empty: give the file holding the PIN, or leave the flag out for a key without one"), showHelp: true}
			}
			if !slices.Contains(keys.TPMKeyAlgorithms(), o.Algorithm) {
				return &usageError{err: fmt.Errorf("--algorithm %q: want one of %s", o.Algorithm, strings.Join(keys.TPMKeyAlgorithms(), ", ")), showHelp: true}
			}
			if o.Device == "" {
				o.Device = os.Getenv(proxyplugin.TPMDeviceEnv)
			}
			o.PINSource = strings.TrimPrefix(o.PINSource, "file:")
			o.Description = "kplug key create"
			pub, err := keys.CreateTPMKey(args[0], o)
			if err != nil {
				return err
			}
			device := o.Device
			if device == "" {
				device = keys.DefaultTPMDevice
			}
			fmt.Fprintf(g.io.Err, "created an %s key in the TPM at %s; its key file is %s (public key SHA-256 %s)\n",
				keyAlgorithm(pub), device, args[0], fingerprint(pub))
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Algorithm, "algorithm", keys.TPMKeyAlgorithms()[0], "key algorithm: "+strings.Join(keys.TPMKeyAlgorithms(), ", "))
	cmd.Flags().StringVar(&o.Device, "device", "", "the TPM: a device such as /dev/tpm0, or a swtpm socket (default: $KPLUG_TPM_DEVICE, then "+keys.DefaultTPMDevice+")")
	cmd.Flags().StringVar(&o.PINSource, "pin-source", "", "a file (PATH or file:PATH) holding the auth value (PIN) the key will require; default: none")
	_ = cmd.RegisterFlagCompletionFunc("algorithm", cobra.FixedCompletions(keys.TPMKeyAlgorithms(), cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// openKey opens KEY as proxy-plugin opens --client-key, for one command. Its errors are
// keys', which name the key without a URI's query, where a secret may have been typed.
func openKey(ref string) (crypto.Signer, io.Closer, error) {
	return keys.OpenSigner(ref, proxyplugin.KeyOptions())
}

func newKeyPublicCommand(*globals) *cobra.Command {
	return &cobra.Command{
		Use:   "public KEY",
		Short: "Print the public key of a key (PEM), never the private key",
		Example: `  kplug key public ~/.kube/kplug/alice.tss2
  kplug key public 'tpm:handle=0x81000002'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, c, err := openKey(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			der, err := x509.MarshalPKIXPublicKey(s.Public())
			if err != nil {
				return fmt.Errorf("key %s: %w", args[0], err)
			}
			_, err = cmd.OutOrStdout().Write(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
			return err
		},
	}
}

// subjectOptions name whom a certificate request is for: kube-apiserver takes the
// certificate's common name as the user name and its organizations as the groups.
type subjectOptions struct {
	user   string
	groups []string
}

func (o *subjectOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.user, "user", "", "the user name the certificate is for: its subject's common name (required)")
	cmd.Flags().StringArrayVar(&o.groups, "group", nil, "a group of the user: an organization of the subject; repeatable")
}

func (o *subjectOptions) check() error {
	if o.user == "" {
		return &usageError{err: errors.New("--user is required: the user name the certificate is for"), showHelp: true}
	}
	return nil
}

// csr makes a PEM certificate signing request for key.
func (o *subjectOptions) csr(key crypto.Signer) ([]byte, error) {
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: o.user, Organization: o.groups},
	}, key)
	if err != nil {
		return nil, fmt.Errorf("signing the certificate request with the key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

func newKeyCSRCommand(*globals) *cobra.Command {
	var o subjectOptions
	cmd := &cobra.Command{
		Use:   "csr KEY --user NAME [--group GROUP]...",
		Short: "Print a PEM certificate signing request for a key",
		Long: `Print a PKCS #10 certificate signing request for KEY, signed by it, for the user and
groups kube-apiserver will see: to have it signed outside the cluster's
CertificateSigningRequest API (kplug key request-certificate uses that API).`,
		Example: `  kplug key csr ~/.kube/kplug/alice.tss2 --user alice --group developers > alice.csr`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.check(); err != nil {
				return err
			}
			s, c, err := openKey(args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			b, err := o.csr(s)
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
	o.AddFlags(cmd)
	return cmd
}

type requestCertificateOptions struct {
	kubeconfig kubeconfigOptions
	subject    subjectOptions
	name       string
	certFile   string
	expiration time.Duration
	wait       time.Duration
}

func newKeyRequestCertificateCommand(g *globals) *cobra.Command {
	o := &requestCertificateOptions{}
	cmd := &cobra.Command{
		Use:   "request-certificate KEY --user NAME --cert-file FILE",
		Short: "Get a client certificate for a key from the cluster (CertificateSigningRequest)",
		Long: `Create a CertificateSigningRequest for KEY with the kubernetes.io/kube-apiserver-client
signer, as the user of the kubeconfig context (who needs the RBAC permission to create
certificatesigningrequests), wait until the cluster's admin has approved it and the
cluster has issued the certificate, and write the certificate to --cert-file.

The admin approves with:  kubectl certificate approve NAME

The file is replaced by renaming a new file over it, so a running kplug proxy-plugin
picks up a renewed certificate without a restart: run this again before the certificate
expires. If waiting is interrupted, run it again with --name NAME to keep waiting for the
same request.`,
		Example: `  kplug key request-certificate ~/.kube/kplug/alice.tss2 --user alice --group developers \
      --cert-file ~/.kube/kplug/alice.crt --expiration 720h`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), g, args[0]) },
	}
	o.kubeconfig.AddFlags(cmd)
	o.subject.AddFlags(cmd)
	cmd.Flags().StringVar(&o.name, "name", "", "the CertificateSigningRequest's name (default: kplug-USER-KEYHASH-TIME)")
	cmd.Flags().StringVar(&o.certFile, "cert-file", "", "where to write the issued certificate, PEM (required)")
	cmd.Flags().DurationVar(&o.expiration, "expiration", 0, "the certificate's requested lifetime, at least 10m (default: the signer's, one year on kube-controller-manager)")
	cmd.Flags().DurationVar(&o.wait, "wait", 15*time.Minute, "how long to wait for approval and issuance")
	return cmd
}

func (o *requestCertificateOptions) run(ctx context.Context, g *globals, ref string) error {
	if o.certFile == "" {
		return &usageError{err: errors.New("--cert-file is required: where to write the certificate"), showHelp: true}
	}
	if err := o.subject.check(); err != nil {
		return err
	}
	if err := checkCertificateTarget(o.certFile); err != nil {
		return err
	}
	if o.expiration != 0 && o.expiration < 10*time.Minute {
		return &usageError{err: fmt.Errorf("--expiration %v: the API accepts at least 10m", o.expiration), showHelp: true}
	}
	s, c, err := openKey(ref)
	if err != nil {
		return err
	}
	defer c.Close()
	req, err := o.subject.csr(s)
	if err != nil {
		return err
	}
	name := o.name
	if name == "" {
		name = csrName(o.subject.user, s.Public(), time.Now())
	}
	u, err := o.kubeconfig.load(g, "")
	if err != nil {
		return err
	}
	defer u.Close()
	session, err := u.connect(ctx, g)
	if err != nil {
		return err
	}
	defer session.Close()
	cfg, err := session.Config()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	csrs := cs.CertificatesV1().CertificateSigningRequests()
	obj := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    req,
			SignerName: kubeAPIServerClientSigner,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth},
		},
	}
	if o.expiration != 0 {
		secs := int32(o.expiration / time.Second) //nolint:gosec // a lifetime in seconds fits
		obj.Spec.ExpirationSeconds = &secs
	}
	createCtx, cancel := context.WithTimeout(ctx, apiRequestTimeout)
	_, err = csrs.Create(createCtx, obj, metav1.CreateOptions{})
	cancel()
	switch {
	case apierrors.IsAlreadyExists(err):
		getCtx, cancel := context.WithTimeout(ctx, apiRequestTimeout)
		existing, gerr := csrs.Get(getCtx, name, metav1.GetOptions{})
		cancel()
		if gerr != nil {
			return fmt.Errorf("certificatesigningrequest %s: %w", name, gerr)
		}
		if !requestIsFor(existing.Spec.Request, s.Public()) {
			return fmt.Errorf("certificatesigningrequest %s already exists for another key: choose another --name", name)
		}
		fmt.Fprintf(g.io.Err, "certificatesigningrequest %s exists for this key; waiting for it\n", name)
	case err != nil:
		return fmt.Errorf("creating certificatesigningrequest %s: %w", name, err)
	default:
		fmt.Fprintf(g.io.Err, "certificatesigningrequest %s created for user %q; waiting for approval (your admin runs: kubectl certificate approve %s)\n", name, o.subject.user, name)
	}
	cert, err := waitForCertificate(ctx, func(ctx context.Context) (*certificatesv1.CertificateSigningRequest, error) {
		ctx, cancel := context.WithTimeout(ctx, apiRequestTimeout)
		defer cancel()
		return csrs.Get(ctx, name, metav1.GetOptions{})
	}, o.wait)
	if err != nil {
		return fmt.Errorf("certificatesigningrequest %s: %w", name, err)
	}
	x, chain, err := checkIssued(cert, s.Public(), o.subject, time.Now())
	if err != nil {
		return fmt.Errorf("certificatesigningrequest %s: %w", name, err)
	}
	if err := replaceFile(o.certFile, chain); err != nil {
		return fmt.Errorf("writing the certificate: %w", err)
	}
	fmt.Fprintf(g.io.Err, "wrote %s: user %q, groups %q, valid until %s\n", o.certFile, x.Subject.CommonName, x.Subject.Organization, x.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// waitForCertificate polls the request until it is issued, denied or failed, or wait ends.
func waitForCertificate(ctx context.Context, get func(context.Context) (*certificatesv1.CertificateSigningRequest, error), wait time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	approved := false
	for {
		csr, err := get(ctx)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		if csr != nil {
			for _, c := range csr.Status.Conditions {
				switch c.Type {
				case certificatesv1.CertificateDenied:
					return nil, fmt.Errorf("denied (%q): %q", c.Reason, c.Message)
				case certificatesv1.CertificateFailed:
					return nil, fmt.Errorf("the signer failed (%q): %q", c.Reason, c.Message)
				case certificatesv1.CertificateApproved:
					approved = true
				}
			}
			if len(csr.Status.Certificate) > 0 {
				return csr.Status.Certificate, nil
			}
		}
		select {
		case <-ctx.Done():
			if approved {
				return nil, fmt.Errorf("approved, but no certificate issued within %v: is kube-controller-manager's csrsigning controller running with the cluster's signing key?", wait)
			}
			return nil, fmt.Errorf("not approved within %v: ask your admin to run kubectl certificate approve %s, then run this again with --name %s", wait, csrNameOf(csr), csrNameOf(csr))
		case <-tick.C:
		}
	}
}

func csrNameOf(csr *certificatesv1.CertificateSigningRequest) string {
	if csr == nil {
		return "NAME"
	}
	return csr.Name
}

// apiRequestTimeout bounds each request to the API server; --wait bounds the whole wait.
const apiRequestTimeout = 30 * time.Second

// maxIssuedBytes bounds what kplug takes from a CertificateSigningRequest's status: a
// client certificate and its chain are a few KiB.
const maxIssuedBytes = 1 << 20

// checkIssued checks what the cluster issued before kplug writes it where a running proxy
// will pick it up (issue 30 second review, N4): PEM certificates only, the first for key,
// for the user and groups asked for, for client authentication, valid now. It returns the
// leaf and the chain re-encoded, so that nothing but certificates is written.
func checkIssued(b []byte, key crypto.PublicKey, want subjectOptions, now time.Time) (*x509.Certificate, []byte, error) {
	if len(b) > maxIssuedBytes {
		return nil, nil, fmt.Errorf("the issued certificate is %d bytes, more than a certificate chain (%d)", len(b), maxIssuedBytes)
	}
	var certs []*x509.Certificate
	for rest := b; len(bytes.TrimSpace(rest)) > 0; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil || block.Type != "CERTIFICATE" {
			return nil, nil, errors.New("the issued certificate holds something other than PEM certificates")
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, nil, fmt.Errorf("the issued certificate: %w", err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, nil, errors.New("the issued certificate is empty")
	}
	x := certs[0]
	if eq, ok := key.(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(x.PublicKey) {
		return nil, nil, errors.New("the issued certificate is for another key")
	}
	gotGroups, wantGroups := slices.Sorted(slices.Values(x.Subject.Organization)), slices.Sorted(slices.Values(want.groups))
	if x.Subject.CommonName != want.user || !slices.Equal(slices.Compact(gotGroups), slices.Compact(wantGroups)) {
		return nil, nil, fmt.Errorf("the issued certificate is for user %q in groups %q, not the user %q in groups %q asked for", x.Subject.CommonName, x.Subject.Organization, want.user, want.groups)
	}
	if !slices.Contains(x.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(x.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil, nil, errors.New("the issued certificate is not for client authentication")
	}
	if now.Before(x.NotBefore) || now.After(x.NotAfter) {
		return nil, nil, fmt.Errorf("the issued certificate is valid from %s to %s, not now", x.NotBefore.UTC().Format(time.RFC3339), x.NotAfter.UTC().Format(time.RFC3339))
	}
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return x, out, nil
}

// checkCertificateTarget refuses to replace a file that holds anything but certificates:
// a mistyped --cert-file naming the key file would destroy the key (issue 30 second
// review, N5).
func checkCertificateTarget(path string) error {
	b, err := privdir.ReadLinked(path, maxIssuedBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("--cert-file: %w", err)
	}
	rest := b
	for len(bytes.TrimSpace(rest)) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil || block.Type != "CERTIFICATE" {
			return &usageError{err: fmt.Errorf("--cert-file %s exists and holds something other than PEM certificates (a key?): kplug replaces only a certificate file", path)}
		}
	}
	return nil
}

// parseIssued checks that the issued certificate is for key and a client certificate.
func parseIssued(b []byte, key crypto.PublicKey) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("the issued certificate is not PEM")
	}
	x, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the issued certificate: %w", err)
	}
	if eq, ok := key.(interface{ Equal(crypto.PublicKey) bool }); !ok || !eq.Equal(x.PublicKey) {
		return nil, errors.New("the issued certificate is for another key")
	}
	return x, nil
}

// requestIsFor reports whether a PEM certificate request is for key.
func requestIsFor(req []byte, key crypto.PublicKey) bool {
	block, _ := pem.Decode(req)
	if block == nil {
		return false
	}
	r, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return false
	}
	eq, ok := key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(r.PublicKey)
}

var nonNameChars = regexp.MustCompile(`[^a-z0-9.-]+`)

// csrName is a default CertificateSigningRequest name: readable, for this key, and new
// each time so that a renewal does not collide with the request it renews.
func csrName(user string, pub crypto.PublicKey, now time.Time) string {
	u := strings.Trim(nonNameChars.ReplaceAllString(strings.ToLower(user), "-"), "-.")
	if len(u) > 40 {
		u = u[:40]
	}
	if u == "" {
		u = "user"
	}
	return fmt.Sprintf("kplug-%s-%s-%d", u, fingerprint(pub)[:8], now.Unix())
}

// fingerprint is the hex SHA-256 of the key's SubjectPublicKeyInfo.
func fingerprint(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "unknown"
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// replaceFile writes b to a new file beside path and renames it over path, so that a
// reader (the proxy watching the certificate) sees the old file or the new, never half.
func replaceFile(path string, b []byte) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

type keyKubeconfigOptions struct {
	kubeconfig kubeconfigOptions
	certFile   string
	out        string
	userName   string
	command    string
}

func newKeyKubeconfigCommand(g *globals) *cobra.Command {
	o := &keyKubeconfigOptions{}
	cmd := &cobra.Command{
		Use:   "kubeconfig KEY --cert-file FILE",
		Short: "Write a kubeconfig whose user authenticates with a key through kplug proxy-plugin",
		Long: `Write a kubeconfig for the cluster of a kubeconfig context (--kubeconfig, --context)
whose user is an exec proxy: kplug proxy-plugin with --client-cert FILE and --client-key
KEY, so that the key signs the TLS handshakes and never leaves its TPM or token. Use it
with kplug run (kubectl, helm and any client), kplug request, or the execproxy package.

The kubeconfig goes to stdout, or to --out, a new file (mode 0600; an existing file is
not replaced). Paths in it are absolute. The exec block runs kplug by name when the kplug
on PATH is this program, else by its absolute path.`,
		Example: `  kplug key kubeconfig ~/.kube/kplug/alice.tss2 --cert-file ~/.kube/kplug/alice.crt --out ~/.kube/alice.yaml
  kplug run --kubeconfig ~/.kube/alice.yaml -- kubectl get pods -w`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(g, cmd.OutOrStdout(), args[0]) },
	}
	cmd.Flags().StringVar(&o.kubeconfig.path, "kubeconfig", "", "kubeconfig to take the cluster from (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVar(&o.kubeconfig.context, "context", "", "context whose cluster to use (default: the current context)")
	cmd.Flags().StringVar(&o.certFile, "cert-file", "", "the key's client certificate, PEM (required)")
	cmd.Flags().StringVar(&o.out, "out", "", "write the kubeconfig to this new file instead of stdout")
	cmd.Flags().StringVar(&o.userName, "user-name", "", "the kubeconfig's user and context name (default: the certificate's user name)")
	cmd.Flags().StringVar(&o.command, "command", "", "the exec block's command (default: kplug, or this program's absolute path)")
	return cmd
}

func (o *keyKubeconfigOptions) run(g *globals, stdout io.Writer, ref string) error {
	if o.certFile == "" {
		return &usageError{err: errors.New("--cert-file is required: the key's client certificate"), showHelp: true}
	}
	certFile, err := filepath.Abs(o.certFile)
	if err != nil {
		return err
	}
	if ref, err = absoluteKeyRef(g, ref); err != nil {
		return err
	}
	s, c, err := openKey(ref)
	if err != nil {
		return err
	}
	_ = c.Close()
	b, err := privdir.ReadLinked(certFile, 1<<20)
	if err != nil {
		return fmt.Errorf("--cert-file: %w", err)
	}
	x, err := parseIssued(b, s.Public())
	if err != nil {
		return invalidConfig(fmt.Errorf("--cert-file %s: %s", certFile, strings.Replace(err.Error(), "the issued certificate", "the certificate", 1)))
	}
	if time.Now().After(x.NotAfter) {
		return invalidConfig(fmt.Errorf("--cert-file %s: the certificate for %q expired at %s", certFile, x.Subject.CommonName, x.NotAfter.UTC().Format(time.RFC3339)))
	}
	kf := o.kubeconfig.files()
	if err := kf.unusable(); err != nil {
		return invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	raw, err := kf.RawConfig()
	if err != nil {
		return invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	if err := clientcmdapi.FlattenConfig(&raw); err != nil {
		return invalidConfig(fmt.Errorf("loading kubeconfig: %w", err))
	}
	ctxName := o.kubeconfig.context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	kctx := raw.Contexts[ctxName]
	cluster := raw.Clusters[kctx.Cluster]
	name := o.userName
	if name == "" {
		name = x.Subject.CommonName
	}
	command := o.command
	if command == "" {
		command = kplugCommand()
	}
	out := clientcmdapi.NewConfig()
	out.Clusters[kctx.Cluster] = cluster
	out.AuthInfos[name] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:         "client.authentication.k8s.io/v1",
		Command:            command,
		Args:               []string{"proxy-plugin", "--client-cert", certFile, "--client-key", ref},
		ProvideClusterInfo: true,
		InteractiveMode:    clientcmdapi.NeverExecInteractiveMode,
	}}
	out.Contexts[name] = &clientcmdapi.Context{Cluster: kctx.Cluster, AuthInfo: name, Namespace: kctx.Namespace}
	out.CurrentContext = name
	data, err := clientcmd.Write(*out)
	if err != nil {
		return err
	}
	if o.out == "" {
		_, err = stdout.Write(data)
		return err
	}
	f, err := os.OpenFile(o.out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("--out %s already exists: kplug does not replace a kubeconfig (merge it with KUBECONFIG=%s:... instead)", o.out, o.out)
	}
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	_, err = io.Copy(f, bytes.NewReader(data))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(o.out)
		return fmt.Errorf("--out: %w", err)
	}
	fmt.Fprintf(g.io.Err, "wrote %s: context %q, user %q through kplug proxy-plugin; try: kplug run --kubeconfig %s -- kubectl auth whoami\n", o.out, name, x.Subject.CommonName, o.out)
	return nil
}

// absoluteKeyRef is KEY as the written kubeconfig gives it to proxy-plugin, which runs
// in whatever directory the client runs in: a path made absolute, and a tpm: or pkcs11:
// URI whose paths are absolute already (issue 30 second review, N3: a relative pin-source
// or module-path would be read, or loaded, from that directory). device= and pin-source=
// are kept with a warning: under a kuberc policy, proxy-plugin refuses them from an exec
// block.
func absoluteKeyRef(g *globals, ref string) (string, error) {
	var paths map[string]string
	switch lower := strings.ToLower(ref); {
	case strings.HasPrefix(lower, "tpm:"):
		u, err := keys.ParseTPMURI("tpm:" + ref[len("tpm:"):])
		if err != nil {
			return "", invalidConfig(err)
		}
		paths = map[string]string{"file=": u.File, "pin-source=": u.PINSource, "device=": u.Device}
		if u.Device != "" || u.PINSource != "" {
			fmt.Fprintf(g.io.Err, "warning: the key's device= and pin-source= go into the kubeconfig, and under a kuberc credential plugin policy proxy-plugin refuses them from an exec block; set $%s and $%s in your environment instead\n", proxyplugin.TPMDeviceEnv, proxyplugin.TPMPINEnv)
		}
	case strings.HasPrefix(lower, "pkcs11:"):
		u, err := keys.ParsePKCS11URI("pkcs11:" + ref[len("pkcs11:"):])
		if err != nil {
			return "", invalidConfig(err)
		}
		paths = map[string]string{"module-path=": u.ModulePath, "pin-source=": u.PINSource}
	default:
		abs, err := filepath.Abs(strings.TrimPrefix(ref, "file:"))
		return abs, err
	}
	for attr, p := range paths {
		if p != "" && !filepath.IsAbs(p) {
			return "", invalidConfig(fmt.Errorf("the key URI's %s%s is a relative path, which proxy-plugin would resolve in whatever directory kubectl runs in: give an absolute path", attr, p))
		}
	}
	return ref, nil
}

// kplugCommand is how an exec block names this program: "kplug" when that is what PATH
// finds, so that the kubeconfig survives an upgrade in place, else the absolute path.
func kplugCommand() string {
	self, err := os.Executable()
	if err != nil {
		return "kplug"
	}
	if onPath, err := exec.LookPath("kplug"); err == nil {
		a, errA := os.Stat(self)
		b, errB := os.Stat(onPath)
		if errA == nil && errB == nil && os.SameFile(a, b) {
			return "kplug"
		}
	}
	return self
}

// keyAlgorithm names a public key's algorithm for messages.
func keyAlgorithm(pub crypto.PublicKey) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	}
	return fmt.Sprintf("%T", pub)
}
