# Shared by the container image tests (sourced, not run): the container engine, the image build,
# what each test started (stopped on exit), and the pass/fail tally.
#
# The engine is docker when its daemon answers, otherwise podman. Where no image registry is
# reachable, ../shared/container/prepare-engine.sh (when it exists beside the checkout) installs
# podman and bootstraps the official base images locally, so the Dockerfile builds unchanged;
# netavark, podman's network stack, needs iptables, which it does not pull in.
#
# Environment: CONTAINER_ENGINE (docker or podman) to choose the engine; MRTR_IMAGE to test an
# image already built (otherwise the Dockerfile is built as localhost/mrtr-gateway:test);
# MRTR_TEST_LOGS=DIR to keep every container's log and the scratch directory in DIR at exit.

IMAGE_TESTS="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$IMAGE_TESTS/../.." && pwd)"

source "$IMAGE_TESTS/checks.sh"

as_root=""
[ "$(id -u)" = 0 ] || as_root="sudo -n"
apt_install() { # PACKAGE...: from Debian's packages, without starting services
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 update -qq
  $as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -qq \
    --no-install-recommends "$@" >/dev/null
}

engine_setup() {
  if [ -n "${CONTAINER_ENGINE:-}" ]; then
    ENGINE="$CONTAINER_ENGINE"
  elif command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    ENGINE=docker
  else
    ENGINE=podman
    command -v iptables >/dev/null || [ -x /usr/sbin/iptables ] || apt_install iptables
    local prepare="$REPO/../shared/container/prepare-engine.sh"
    if [ -f "$prepare" ]; then
      bash "$prepare"
    elif ! command -v podman >/dev/null; then
      # With a reachable image registry, podman pulls the base images itself.
      apt_install podman runc netavark aardvark-dns
    fi
  fi
  command -v "$ENGINE" >/dev/null || { echo "no container engine (docker or podman)" >&2; exit 1; }
  # podman's --read-only keeps /run, /var/tmp and /dev/shm writable unless told not to;
  # Kubernetes' readOnlyRootFilesystem does not.
  read_only=(--read-only)
  if [ "$ENGINE" = podman ]; then read_only+=(--read-only-tmpfs=false); fi
  echo "engine: $("$ENGINE" --version)"
}

image_build() { # builds the Dockerfile unless MRTR_IMAGE names an image; sets IMAGE
  if [ -n "${MRTR_IMAGE:-}" ]; then
    IMAGE="$MRTR_IMAGE"
    return
  fi
  IMAGE=localhost/mrtr-gateway:test
  local started=$SECONDS
  if [ "$ENGINE" = podman ]; then
    # Docker's image format keeps the HEALTHCHECK (OCI's has no field for it).
    (cd "$REPO" && podman build --format docker -t "$IMAGE" .)
  else
    (cd "$REPO" && docker build -t "$IMAGE" .)
  fi
  echo "built $IMAGE in $((SECONDS - started)) s"
}

# What a test starts, removed on exit whatever happens.
started_containers=()
started_networks=()
started_pids=()
scratch="$(mktemp -d)"
cleanup() {
  local pid c n
  if [ -n "${MRTR_TEST_LOGS:-}" ]; then # keep every container's log, for a failure's autopsy
    mkdir -p "$MRTR_TEST_LOGS"
    for c in "${started_containers[@]}"; do
      "$ENGINE" logs "$c" > "$MRTR_TEST_LOGS/$c.log" 2>&1 || true
    done
    cp -r "$scratch" "$MRTR_TEST_LOGS/scratch" 2>/dev/null || true
  fi
  for pid in "${started_pids[@]}"; do
    # Each was started by start_background as the leader of its own process group.
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for c in "${started_containers[@]}"; do
    "$ENGINE" rm -f "$c" >/dev/null 2>&1 || true
  done
  for n in "${started_networks[@]}"; do
    "$ENGINE" network rm "$n" >/dev/null 2>&1 || true
  done
  rm -rf "$scratch"
}
trap cleanup EXIT

# Job control: each background job is a process group of its own, so that stopping it stops what
# it started too (curl inside a function, nginx's workers).
set -m
start_background() { # COMMAND-OR-FUNCTION...: runs it as a background job, stopped at exit
  # unless waited for with wait_background; sets BACKGROUND_PID
  "$@" &
  BACKGROUND_PID=$!
  started_pids+=("$BACKGROUND_PID")
}

wait_background() { # PID: waits for it (its status is ignored) and forgets it
  wait "$1" || true
  local kept=() pid
  for pid in "${started_pids[@]}"; do
    [ "$pid" = "$1" ] || kept+=("$pid")
  done
  started_pids=("${kept[@]}")
}

run_container() { # NAME ENGINE-RUN-ARGS...: starts it detached, to be removed on exit
  local name="$1"
  shift
  started_containers+=("$name")
  # podman schedules HEALTHCHECKs with systemd timers and says so on every start where there is
  # no systemd; the check itself is run by container.sh.
  "$ENGINE" run -d --name "$name" "$@" 2> >(grep -v 'systemd connection' >&2) >/dev/null
}

host_port() { # NAME CONTAINER-PORT: the loopback port it is published on
  "$ENGINE" port "$1" "$2/tcp" | head -n 1 | sed 's/.*://'
}

wait_http() { # URL [SECONDS]: until it answers 200
  local deadline=$((SECONDS + ${2:-60}))
  while [ $SECONDS -lt $deadline ]; do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1" || true)" = 200 ] && return 0
    sleep 0.2
  done
  return 1
}

exit_code_after() { # NAME SECONDS: waits that long at most for the container to stop, prints
  # its exit code ("" when it did not stop)
  timeout "$2" "$ENGINE" wait "$1" 2>&1 | tail -n 1 || true
}
