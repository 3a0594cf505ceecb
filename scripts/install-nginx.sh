#!/usr/bin/env bash
# Installs nginx from Debian's packages when it is missing, without starting it: the benchmark's
# comparison proxy (mrtr-bench M1) and the round-robin balancer in front of the container fleet
# test (tests/image/fleet.sh). A policy-rc.d keeps the package from starting a daemon.
set -euo pipefail
if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
as_root=""
if [ "$(id -u)" != 0 ]; then as_root="sudo -n"; fi
policy_added=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $as_root tee /usr/sbin/policy-rc.d >/dev/null
  $as_root chmod +x /usr/sbin/policy-rc.d
  policy_added=1
  trap "$as_root rm -f /usr/sbin/policy-rc.d" EXIT
fi
apt_get="$as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120"
$apt_get update -qq
$apt_get install -y -qq --no-install-recommends nginx >/dev/null
if [ "$policy_added" = 1 ]; then
  $as_root rm -f /usr/sbin/policy-rc.d
  trap - EXIT
fi
