#!/usr/bin/env python3
"""Test credentials for the container fleet, made with the openssl command line.

  pki.py tls DIR NAME...            a test CA (DIR/ca.pem) and, for each NAME, a server
                                    certificate for DNS name NAME (DIR/NAME.pem, DIR/NAME.key)
  pki.py issuer DIR                 an RS256 token issuer: DIR/issuer.key and its JWKS,
                                    DIR/jwks.json (one key, kid "k1")
  pki.py token DIR ISS AUD SUB      prints a JWT signed by DIR/issuer.key, valid for 10 minutes

Nothing here is a real credential: every key is made fresh for one run and lives in DIR.
"""

import base64
import json
import subprocess
import sys
import time
from pathlib import Path


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def tls(out, names):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=mrtr-gateway container test CA",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            "-keyout", str(out / "ca.key"), "-out", str(out / "ca.pem"))
    for name in names:
        key, csr, pem = (out / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", str(key), "-out", str(csr))
        ext = out / f"{name}.ext"
        ext.write_text(f"subjectAltName=DNS:{name}\nextendedKeyUsage=serverAuth\n"
                       "basicConstraints=CA:FALSE\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(out / "ca.pem"),
                "-CAkey", str(out / "ca.key"), "-CAcreateserial", "-days", "2",
                "-extfile", str(ext), "-out", str(pem))
        # The servers run as another user in their containers.
        key.chmod(0o644)


def issuer(out):
    key = out / "issuer.key"
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key))
    text = subprocess.run(["openssl", "rsa", "-in", str(key), "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout
    # "modulus:\n    00:ab:..." up to "publicExponent: 65537 (0x10001)"
    hex_modulus = text.split("modulus:")[1].split("publicExponent:")[0]
    modulus = bytes.fromhex("".join(hex_modulus.split()).replace(":", "")).lstrip(b"\0")
    exponent = int(text.split("publicExponent:")[1].split()[0])
    jwk = {"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256", "n": b64url(modulus),
           "e": b64url(exponent.to_bytes((exponent.bit_length() + 7) // 8, "big"))}
    (out / "jwks.json").write_text(json.dumps({"keys": [jwk]}))


def token(out, iss, aud, sub):
    now = int(time.time())
    header = b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode())
    claims = b64url(json.dumps({"iss": iss, "aud": aud, "sub": sub, "iat": now,
                                "exp": now + 600}).encode())
    signing_input = f"{header}.{claims}".encode()
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(out / "issuer.key")],
                               input=signing_input, check=True, capture_output=True).stdout
    print(f"{header}.{claims}.{b64url(signature)}")


def main(argv):
    if len(argv) >= 3 and argv[1] == "tls":
        tls(Path(argv[2]), argv[3:])
    elif len(argv) == 3 and argv[1] == "issuer":
        issuer(Path(argv[2]))
    elif len(argv) == 6 and argv[1] == "token":
        token(Path(argv[2]), *argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
