#!/usr/bin/env bash
# Enforces the package boundaries of docs/architecture.md:
#   core      imports only the standard library;
#   sim       imports core (and third-party libraries), never allocator;
#   Kubernetes and generated proto types stop at allocator (and the
#   packages whose job is talking to clusters).
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
fail=0

# deps PKG: every package PKG depends on that is not in the standard library.
deps() { go list -deps -f '{{if not .Standard}}{{.ImportPath}}{{end}}' "$1" 2>/dev/null | grep -v "^$1\$" || true; }

bad=$(deps ./core/... | grep -v "^${mod}/core" || true)
if [ -n "$bad" ]; then
  echo "core must depend on the standard library only; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
fi

if [ -d sim ]; then
  bad=$(deps ./sim/... | grep -E "^${mod}/allocator|^k8s.io/|^google.golang.org/grpc" || true)
  if [ -n "$bad" ]; then
    echo "sim must not depend on allocator, Kubernetes or gRPC; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
fi

# trace is read by the simulator: the standard library and core only.
if [ -d trace ]; then
  bad=$(deps ./trace/... | grep -vE "^${mod}/(core|trace)" || true)
  if [ -n "$bad" ]; then
    echo "trace must depend on the standard library and core only; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
fi

# plan runs the simulator; like sim, it has no business with the service.
if [ -d plan ]; then
  bad=$(deps ./plan/... | grep -E "^${mod}/allocator|^k8s.io/|^google.golang.org/grpc" || true)
  if [ -n "$bad" ]; then
    echo "plan must not depend on allocator, Kubernetes or gRPC; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
fi

# soak holds a run's history, snapshot, checker and fault schedule: files
# and values only; driving clusters is its command's business.
if [ -d soak ]; then
  bad=$(deps ./soak/... | grep -E "^${mod}/allocator|^k8s.io/|^sigs.k8s.io/|^google.golang.org/grpc" || true)
  if [ -n "$bad" ]; then
    echo "soak must not depend on allocator, Kubernetes or gRPC; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
fi

# scenarios reads and simulates scenario files; only scenarios/live, which
# runs them on live allocators, may reach the service, gRPC or Kubernetes.
bad=$(deps ./scenarios | grep -E "^${mod}/allocator|^${mod}/kindcluster|^k8s.io/|^google.golang.org/grpc" || true)
if [ -n "$bad" ]; then
  echo "scenarios must not depend on the allocator, rigs, Kubernetes or gRPC (scenarios/live may); it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
fi

# The rig brings up its own topology; scenario files are converted to it in
# scenarios/live, so the rig does not depend on their format.
bad=$(deps ./kindcluster/rig | grep -E "^${mod}/(scenarios|sim|plan)(/|\$)" || true)
if [ -n "$bad" ]; then
  echo "kindcluster/rig must not depend on scenarios, sim or plan (scenarios/live converts a scenario to a rig.Topology); it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
fi

# loadgen drives load from a pacer and a request; scenarios/live hands it a
# scenario's, so the arrows between the two folders run one way only.
bad=$(deps ./loadgen/... | grep -E "^${mod}/(scenarios|sim|plan)(/|\$)" || true)
if [ -n "$bad" ]; then
  echo "loadgen must not depend on scenarios, sim or plan (scenarios/live depends on loadgen); it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
fi

# reports reads results; it has no business with clusters or the service
# itself (the wire types it sees come through loadgen's result).
if [ -d reports ]; then
  bad=$(deps ./reports/... | grep -E "^k8s.io/|^${mod}/allocator(/kube|/memory)?\$" || true)
  if [ -n "$bad" ]; then
    echo "reports must not depend on Kubernetes or the allocator service; it pulls in:"; echo "$bad" | sed 's/^/  /'; fail=1
  fi
fi

# kind drives Docker; only the rig's kind provider (and qm, which offers it)
# may pull it in, so no allocator, rig or test binary carries it by accident.
bad=$(go list -f '{{.ImportPath}} {{join .Deps " "}}' ./... 2>/dev/null |
  grep -E ' sigs\.k8s\.io/kind(/| |$)' | cut -d' ' -f1 |
  grep -vxE "${mod}/kindcluster/kind|${mod}/cmd/qm" || true)
if [ -n "$bad" ]; then
  echo "only kindcluster/kind (and cmd/qm) may depend on sigs.k8s.io/kind; these do:"; echo "$bad" | sed 's/^/  /'; fail=1
fi

exit $fail
