// Runs http-message-signatures (an RFC 9421 implementation kplug did not write) for
// test/interop: reads one JSON job on stdin, writes one JSON answer on stdout.
//
//   {"op": "verify", "request": {method, url, headers}, "key": PEM public key, "alg"}
//     -> {"verified": bool, "params": {...}} or {"error": "..."}
//   {"op": "verify", "request": ..., "ca": PEM certificate, "alg"}
//     the KEP-6308 certificate form: the key is the one in the request's
//     Signature-Certificate (which must be covered), that certificate must be issued by ca,
//     and keyid must be x509-sha256: and the SHA-256 of its DER, all checked here
//     -> {"verified": bool, "params": {...}, "subject": the certificate's subject}
//   {"op": "sign", "request": {method, url, headers, body}, "key": PEM private key, "alg",
//    "keyid", "fields": [...], "librarySigner": bool, "certificate": PEM certificate}
//     -> {"headers": {...}} with Content-Digest (sha-256) added when there is a body; with a
//        certificate, Signature-Certificate (its DER, a structured field byte sequence) is
//        added and the keyid is x509-sha256: and the DER's SHA-256, computed here.
//   With "alg": "hmac-sha256", "hmac" replaces "key" in both: {"secretBase64"}, the shared
//   secret as it is, or {"secretBase64", "sigv4": {"name", "region", "service"}}, an AWS
//   secret access key whose SigV4 signing key is folded here with node's own HMAC for the
//   date of the signature's created parameter; the keyid is then name/date/region/service/
//   aws4_request (SigV4's credential scope), which verify checks.
//
// Signing uses the KEP-6308 parameters (created, nonce, alg, tag, keyid, in that order).
// The library's own rsa-pss-sha512 signer leaves the salt length at OpenSSL's maximum;
// RFC 9421 §3.3.1 says 64 bytes, so unless librarySigner is set, rsa-pss-sha512 signs
// through node's crypto with saltLength 64 and the library does everything else.
'use strict';

const crypto = require('crypto');
const { httpbis, createSigner, createVerifier } = require('http-message-signatures');

function rfcSigner(key, alg, librarySigner) {
  if (alg !== 'rsa-pss-sha512' || librarySigner) {
    return createSigner(key, alg);
  }
  return {
    alg,
    sign: async (data) => crypto.createSign('sha512').update(data).sign({
      key,
      padding: crypto.constants.RSA_PKCS1_PSS_PADDING,
      saltLength: 64,
    }),
  };
}

// x509KeyID is the KEP-6308 keyid of a certificate: x509-sha256: and its DER's SHA-256.
function x509KeyID(der) {
  return 'x509-sha256:' + crypto.createHash('sha256').update(der).digest('hex');
}

// signatureCertificate reads the Signature-Certificate field, a structured field byte
// sequence (:base64:), from headers whose names are lowercase.
function signatureCertificate(headers) {
  let v = headers['signature-certificate'];
  if (Array.isArray(v)) v = v.join(',');
  const m = /^:([A-Za-z0-9+/=]*):$/.exec((v || '').trim());
  if (!m) throw new Error(`no Signature-Certificate byte sequence in ${JSON.stringify(v)}`);
  return new crypto.X509Certificate(Buffer.from(m[1], 'base64'));
}

// sigv4Date is created's UTC date as SigV4 writes it: YYYYMMDD.
function sigv4Date(created) {
  return created.toISOString().slice(0, 10).replaceAll('-', '');
}

// hmacKey is the HMAC key of job.hmac for a signature created at created, and the keyid a
// derived key must have (null for a plain secret). The SigV4 fold is written here from
// AWS's documentation, sharing nothing with kplug's ladder.
function hmacKey(h, created) {
  const secret = Buffer.from(h.secretBase64, 'base64');
  if (!h.sigv4) return { key: secret, keyid: null };
  const { name, region, service } = h.sigv4;
  const date = sigv4Date(created);
  const hmac = (k, v) => crypto.createHmac('sha256', k).update(v).digest();
  const key = hmac(hmac(hmac(hmac(Buffer.concat([Buffer.from('AWS4'), secret]), date), region), service), 'aws4_request');
  return { key, keyid: [name, date, region, service, 'aws4_request'].join('/') };
}

async function verify(job) {
  let key = job.key && crypto.createPublicKey(job.key);
  const requiredFields = ['@method', '@authority', '@path', '@query'];
  let subject;
  if (job.ca) {
    const ca = new crypto.X509Certificate(job.ca);
    const cert = signatureCertificate(job.request.headers);
    if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey)) {
      throw new Error(`the Signature-Certificate (${cert.subject}) is not issued by the CA`);
    }
    key = cert.publicKey;
    subject = cert.subject;
    requiredFields.push('signature-certificate');
  }
  let params = null;
  const verified = await httpbis.verifyMessage({
    keyLookup: async (p) => {
      params = p;
      if (job.ca && p.keyid !== x509KeyID(signatureCertificate(job.request.headers).raw)) {
        throw new Error(`keyid ${p.keyid} is not the Signature-Certificate's digest`);
      }
      if (job.hmac) {
        const h = hmacKey(job.hmac, p.created);
        if (h.keyid !== null && p.keyid !== h.keyid) {
          throw new Error(`keyid ${p.keyid} is not the derived key's ${h.keyid}`);
        }
        key = h.key;
      }
      return { id: p.keyid, algs: [job.alg], verify: createVerifier(key, job.alg) };
    },
    requiredParams: ['created', 'nonce', 'alg', 'tag', 'keyid'],
    requiredFields,
    maxAge: 60,
    tolerance: 5,
  }, job.request);
  return { verified: verified === true, params, subject };
}

async function sign(job) {
  // Seconds, as created carries them: the derived key is for this created's date.
  const created = new Date(Math.floor(Date.now() / 1000) * 1000);
  let key;
  let keyid = job.keyid;
  if (job.hmac) {
    const h = hmacKey(job.hmac, created);
    key = h.key;
    keyid = h.keyid ?? keyid;
  } else {
    key = crypto.createPrivateKey(job.key);
  }
  const headers = { ...job.request.headers };
  if (job.request.body) {
    const d = crypto.createHash('sha256').update(job.request.body).digest('base64');
    headers['Content-Digest'] = `sha-256=:${d}:`;
  }
  if (job.certificate) {
    const der = new crypto.X509Certificate(job.certificate).raw;
    headers['Signature-Certificate'] = `:${der.toString('base64')}:`;
    keyid = x509KeyID(der);
  }
  const signer = rfcSigner(key, job.alg, job.librarySigner);
  const signed = await httpbis.signMessage({
    key: { ...signer, id: keyid },
    name: 'sig1',
    fields: job.fields,
    params: ['created', 'nonce', 'alg', 'tag', 'keyid'],
    paramValues: { created, nonce: crypto.randomBytes(16).toString('base64url'), tag: 'kubernetes' },
  }, { method: job.request.method, url: job.request.url, headers });
  return { headers: signed.headers };
}

async function main() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  const job = JSON.parse(Buffer.concat(chunks).toString());
  let out;
  try {
    out = job.op === 'sign' ? await sign(job) : await verify(job);
  } catch (e) {
    out = { error: String(e && e.message ? e.message : e) };
  }
  process.stdout.write(JSON.stringify(out));
}

main();
