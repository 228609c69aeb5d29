// Runs http-message-signatures (an RFC 9421 implementation kplug did not write) for
// test/interop: reads one JSON job on stdin, writes one JSON answer on stdout.
//
//   {"op": "verify", "request": {method, url, headers}, "key": PEM public key, "alg"}
//     -> {"verified": bool, "params": {...}} or {"error": "..."}
//   {"op": "sign", "request": {method, url, headers, body}, "key": PEM private key, "alg",
//    "keyid", "fields": [...], "librarySigner": bool}
//     -> {"headers": {...}} with Content-Digest (sha-256) added when there is a body.
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

async function verify(job) {
  const key = crypto.createPublicKey(job.key);
  let params = null;
  const verified = await httpbis.verifyMessage({
    keyLookup: async (p) => {
      params = p;
      return { id: p.keyid, algs: [job.alg], verify: createVerifier(key, job.alg) };
    },
    requiredParams: ['created', 'nonce', 'alg', 'tag', 'keyid'],
    requiredFields: ['@method', '@authority', '@path', '@query'],
    maxAge: 60,
    tolerance: 5,
  }, job.request);
  return { verified: verified === true, params };
}

async function sign(job) {
  const key = crypto.createPrivateKey(job.key);
  const headers = { ...job.request.headers };
  if (job.request.body) {
    const d = crypto.createHash('sha256').update(job.request.body).digest('base64');
    headers['Content-Digest'] = `sha-256=:${d}:`;
  }
  const signer = rfcSigner(key, job.alg, job.librarySigner);
  const signed = await httpbis.signMessage({
    key: { ...signer, id: job.keyid },
    name: 'sig1',
    fields: job.fields,
    params: ['created', 'nonce', 'alg', 'tag', 'keyid'],
    paramValues: { nonce: crypto.randomBytes(16).toString('base64url'), tag: 'kubernetes' },
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
