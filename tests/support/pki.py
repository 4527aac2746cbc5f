"""A throwaway PKI for the TLS tests: a pool CA, member certificates, a rogue CA."""
import os
import ssl
import subprocess


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
            "-subj", f"/CN={name}", cwd=d)
    return os.path.join(d, f"{name}.crt")


def make_cert(d, ca, name):
    """A certificate for name signed by ca: server and client use, the SANs
    the gateway and Python check (pic-pool, 127.0.0.1).  (cert, key)."""
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("subjectAltName=DNS:pic-pool,IP:127.0.0.1\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
            "-extfile", f"{name}.ext", cwd=d)
    return os.path.join(d, f"{name}.crt"), os.path.join(d, f"{name}.key")


class Pki:
    """A pool CA with certificates for its members, and a rogue CA."""

    def __init__(self, d):
        self.dir = d
        self.ca = make_ca(d, "pool-ca")
        self.rogue_ca = make_ca(d, "rogue-ca")

    def cert(self, name, ca="pool-ca"):
        return make_cert(self.dir, ca, name)

    def engine_args(self, name, ca="pool-ca"):
        cert, key = self.cert(name, ca)
        return ("--tls-cert", cert, "--tls-key", key, "--tls-client-ca", self.ca)

    def client(self, name=None, ca="pool-ca"):
        """Python's TLS client trusting the pool CA, with a certificate of ca
        (name None: none)."""
        ctx = ssl.create_default_context(cafile=self.ca)
        if name:
            ctx.load_cert_chain(*self.cert(name, ca))
        return ctx
