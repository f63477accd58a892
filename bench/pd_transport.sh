#!/usr/bin/env bash
# The P/D KV push's transport, measured (issue #15): plain TCP against UCX on loopback, the same
# framed bytes through each. Builds bench/pd_transport (fathom_pd_transport_bench) in
# build-bench-ucx with -DFATHOM_BENCH_UCX=ON — installing libucx-dev first when pkg-config has
# no `ucx` (Debian 12: 1.13.1; the product itself never depends on UCX) — and runs it:
#   two processes, P sending and D receiving, a seeded push of real KV objects in kv/pd_wire.h
#   frames and chunks, D checking every chunk, frame and object as `fathom serve --role decode`
#   does and comparing what arrived with what was sent;
#   transports interleaved in every cell (tcp, ucx-tcp, ucx-shm, ucx-tcp-poll, ucx-shm-poll):
#     tcp           one TCP connection on 127.0.0.1, TCP_NODELAY, blocking calls
#     ucx-tcp       UCX UCP tag API, UCX_TLS=tcp, sleeping on the worker's event fd when idle
#     ucx-shm       UCX UCP tag API, UCX_TLS=sm (shared memory; CMA for large messages)
#     ucx-*-poll    the same, busy polling (UCX's usual mode, NIXL's and MPI's)
#   protocols: ack (P waits for D's answer to each chunk, as the POST per chunk does today) and
#   pipelined (P sends every chunk, D answers once);
#   payloads 3,091,036 B (the demo model's 2,048-token hand-off: 15 block objects of 197,276 B
#   and a 131,472-B window object, 3,091,076 B on the wire in one chunk), 18,000,000 B (the size
#   of V4.1-Flash's window side object) and 64 MiB; chunks of 256 KiB and 8 MiB.
# Prints the machine (nproc, CPU, load before and after), what UCX selected, and one table.
# Exits non-zero when any push failed its checks. Run it on a quiet machine: a busy-polling
# transport is only as fast as the cores it does not have to share.
# Usage: bench/pd_transport.sh [REPEATS] [extra bench options, e.g. --payload-bytes 3091036]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
repeats=${1:-10}
shift || true
build="$root/build-bench-ucx"

if ! pkg-config --exists ucx; then
  echo "== installing libucx-dev (pkg-config has no ucx) =="
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get install -y -qq libucx-dev >/dev/null
fi

echo "== build (Release, $build) =="
CCACHE_BASEDIR="$root" nice -n 10 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DFATHOM_BENCH_UCX=ON >/dev/null
nice -n 10 cmake --build "$build" -j 2 --target fathom_pd_transport_bench | tail -1

echo "== machine =="
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "ucx: $(pkg-config --modversion ucx)"
echo "load before: $(uptime)"

bench="$build/bench/pd_transport/fathom_pd_transport_bench"
rc=0
"$bench" --repeats "$repeats" --warmup 1 "$@" || rc=$?
echo "load after:  $(uptime)"
if [[ $rc -ne 0 ]]; then
  echo "pd_transport.sh: the bench failed (exit $rc)" >&2
fi
exit $rc
