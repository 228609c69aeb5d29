#!/usr/bin/env bash
# Installs the Debian packages the tests need and a bare machine lacks. As root it runs
# apt-get; otherwise it prints the one command to run and exits 2, so that `make test` never
# fails later for a missing package.
set -euo pipefail

# command:package pairs; a package is missing when its command is (or, for a /path, that file).
needs=(
	gcc:gcc                  # cgo, for PKCS#11 keys
	git:git                  # version stamps
	unshare:util-linux       # one UTS namespace per kube-apiserver in e2e tests
	softhsm2-util:softhsm2   # PKCS#11 tokens for the hardware-key tests
	swtpm:swtpm                           # a software TPM 2.0 for the TPM key tests
	swtpm_setup:swtpm-tools               # its provisioning tools, as a TPM 2.0 user has them
	tpm2_createprimary:tpm2-tools         # TPM keys made as users make them (tpm2_encodeobject)
	tpm2_ptool:libtpm2-pkcs11-tools       # tpm2-pkcs11 tokens, the PKCS#11 way to a TPM
	/usr/lib/x86_64-linux-gnu/pkcs11/libtpm2_pkcs11.so:libtpm2-pkcs11-1   # its module
	tpm2-abrmd:tpm2-abrmd                 # the resource manager tpm2-pkcs11 needs in front of a swtpm
	/usr/lib/x86_64-linux-gnu/libtss2-tcti-tabrmd.so.0:libtss2-tcti-tabrmd0   # the TCTI that reaches it
	dbus-daemon:dbus-daemon               # a private session bus per keyring test
	gnome-keyring-daemon:gnome-keyring    # a real Secret Service on it (exec-cache --storage keyring)
	secret-tool:libsecret-tools           # the Secret Service as users inspect it
	keyctl:keyutils                       # the kernel keyring as users inspect it
	node:nodejs                           # test/interop runs an npm RFC 9421 implementation
	npm:npm                               # make tools installs it (npm ci)
	skopeo:skopeo                         # a real registry client through the docker credential helper
	/usr/share/bash-completion/bash_completion:bash-completion   # kplug completion bash, run in bash
	/usr/sbin/runc:runc                   # the container runtime of the kubelet tests' containerd
	/usr/sbin/sshd:openssh-server         # sshd on loopback: ssh -R forwarding of the exec-cache agent
	ssh:openssh-client                    # the ssh session (and ssh-keygen) of those tests
)
missing=()
for pair in "${needs[@]}"; do
	need=${pair%%:*}
	if [[ $need == /* ]]; then
		[[ -e $need ]] || missing+=("${pair#*:}")
	else
		command -v "$need" >/dev/null 2>&1 || missing+=("${pair#*:}")
	fi
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -ne 0 ]]; then
	echo "deps: the tests need ${missing[*]}: run 'sudo apt-get install -y ${missing[*]}' (or your system's equivalent), then retry" >&2
	exit 2
fi
if ! command -v apt-get >/dev/null 2>&1; then
	echo "deps: the tests need ${missing[*]}, and this machine has no apt-get: install them with your package manager, then retry" >&2
	exit 2
fi
echo "deps: installing ${missing[*]}" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
