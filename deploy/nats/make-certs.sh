#!/usr/bin/env bash
# Make a private CA and certificates for a NATS server and its clients with openssl,
# shaped to pass strict X.509 verification (Python 3.13's default context sets
# VERIFY_X509_STRICT): the CA has critical basic constraints and key usage, every
# leaf names its CA's key, its usage and, for a server, its addresses.
#
#   bash deploy/nats/make-certs.sh DIR [SERVER_NAMES] [DAYS]
#
# SERVER_NAMES is a subjectAltName list (default: IP:127.0.0.1,DNS:localhost).
# DIR gets ca.pem / ca-key.pem, server.pem / server-key.pem (for nats-server's
# tls block) and client.pem / client-key.pem (for --tls-cert / --tls-key when the
# server sets verify: true). Keys are written readable by their owner only.
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR [SERVER_NAMES] [DAYS]}
names=${2:-IP:127.0.0.1,DNS:localhost}
days=${3:-825}
mkdir -p "$dir"
cd "$dir"
umask 077
cat > ca.ext <<'EOF'
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
EOF
cat > server.ext <<EOF
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = $names
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EOF
cat > client.ext <<'EOF'
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
EOF
openssl req -new -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days "$days" \
    -subj "/CN=hookbus CA" -extensions v3_ca -config <(printf '[req]\ndistinguished_name=dn\n[dn]\n[v3_ca]\n'; cat ca.ext) \
    2>/dev/null
for leaf in server client; do
    openssl req -new -newkey rsa:2048 -nodes -keyout "$leaf-key.pem" -out "$leaf.csr" -subj "/CN=hookbus $leaf" 2>/dev/null
    openssl x509 -req -in "$leaf.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out "$leaf.pem" \
        -days "$days" -extfile "$leaf.ext" 2>/dev/null
    rm -f "$leaf.csr"
done
rm -f ca.ext server.ext client.ext ca.srl
chmod 644 ca.pem server.pem client.pem
echo "made $dir/{ca,server,client}.pem and their keys"
