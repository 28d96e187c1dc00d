#!/bin/sh
# secret.sh CERTS_DIR IDENTITY NAME [NAMESPACE]: prints a v1 Secret named
# NAME holding the client certificate, key and server CA that `qm certs`
# wrote for IDENTITY under CERTS_DIR, the way a GameServerAllocationPolicy's
# connectionInfo.secretName expects them (tls.crt, tls.key, ca.crt).
# Append it to a --policies file, or `kubectl apply -f -` it.
set -eu
if [ $# -lt 3 ]; then
  echo "usage: $0 CERTS_DIR IDENTITY NAME [NAMESPACE]" >&2
  exit 2
fi
dir=$1/clients/$2
for f in tls.crt tls.key ca.crt; do
  [ -r "$dir/$f" ] || { echo "$0: no $dir/$f (run: qm certs --dir $1 --clients $2)" >&2; exit 1; }
done
printf -- '---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: %s\n  namespace: %s\nstringData:\n' "$3" "${4:-default}"
for f in tls.crt tls.key ca.crt; do
  printf '  %s: |\n' "$f"
  sed 's/^/    /' "$dir/$f"
done
