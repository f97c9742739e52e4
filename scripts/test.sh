#!/usr/bin/env bash
# The whole test suite with real components. Installs what is missing, starts what it needs.
# Extra arguments go to pytest, e.g. `make test ARGS="-m unit"`.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)

need_pkgs=()
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_pkgs+=(postgresql)
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v chromium >/dev/null || need_pkgs+=(chromium)
command -v chromedriver >/dev/null || need_pkgs+=(chromium-driver)
command -v prometheus >/dev/null || need_pkgs+=(prometheus)
command -v openssl >/dev/null || need_pkgs+=(openssl)
command -v unzip >/dev/null || need_pkgs+=(unzip)
# A Unicode font for statement PDFs (without one they fall back to Latin-1 only).
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need_pkgs+=(fonts-dejavu-core)
command -v go >/dev/null || need_pkgs+=(golang-go)  # needs Go ≥ 1.26 for Kubernetes 1.37
command -v mvn >/dev/null || need_pkgs+=(maven)     # fetches Keycloak from Maven Central
# The Docker client here has no compose plugin; Debian's docker-compose lints the file.
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || need_pkgs+=(docker-compose)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  echo "test: installing Debian packages: ${need_pkgs[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
  # The packaged services are not used: the tests start their own on free ports.
  for svc in postgresql redis-server prometheus; do
    $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
  done
fi

# The whole suite: build the k8s tier's binaries in the background from now on (a file check
# each when cached), so a cold build overlaps the set-up and the tests that need none of them.
# It needs only the standard library, so it starts before the virtualenv is made.
prebuild_pid=""
if [ $# -eq 0 ] || [ "${PORTAL_PREBUILD:-}" = 1 ]; then
  prebuild_log="$(mktemp -t aifactory-prebuild.XXXXXX)"
  setsid python3 -u -m tests.harness.prebuild >"$prebuild_log" 2>&1 &
  prebuild_pid=$!
  # A run that ends first (a failure, Ctrl-C) stops the builds too; an unfinished binary is
  # never cached, so the next run starts that one again.
  # (Under set -e a failing command in the trap would replace the run's exit code.)
  trap 'if [ -n "$prebuild_pid" ]; then kill -- -"$prebuild_pid" 2>/dev/null || true; fi' EXIT
fi
bash scripts/venv.sh test
# The FinOps FOCUS validator needs Python 3.12 (the portal runs on 3.11): its own environment,
# cached (the test that runs it makes it too, so a single file run needs no step of its own).
if [ $# -eq 0 ]; then
  bash scripts/venv.sh focus >/dev/null || echo "test: no FOCUS validator environment (needs Python 3.12)"
fi
bash scripts/assets.sh test
# Lint first: a finding fails the run (the same command CI runs).
echo "test: ruff check"
.venv/bin/ruff check .
set +e
# While the builds run they are the longest path (the cluster's tests wait for them), so the
# tests take a lower priority: the rest of the suite runs on what the compiler leaves, rather
# than doubling the build (seen: kube-apiserver 490 s alone, 957 s beside the tests at the
# same priority). Warm, the builds are done at once and nothing competes.
nice_tests=()
[ -n "$prebuild_pid" ] && nice_tests=(nice -n 5)
"${nice_tests[@]}" .venv/bin/python -m tests.harness "$@"
rc=$?
set -e
if [ -n "$prebuild_pid" ]; then
  grep -E "ready in|failed|done in" "$prebuild_log" | sed 's/^/test: /' || true
fi
echo "test: finished in $(( $(date +%s) - started ))s with exit code $rc"
exit $rc
