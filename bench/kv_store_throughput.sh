#!/usr/bin/env bash
# The KV store tiers' read throughput beside the machine's own, in one run on one machine:
#   L2 disk  — OBJECTS objects of BYTES bytes (default: a V4.1-Flash block object as Fathom
#              stores it, from `fathom inspect` on tests/data/model/v41_flash_config.json)
#              written through `fathom bench kvstore --dir` (DiskStore), then read back with
#              get_many(): cold (the page cache dropped first, when this runs as root and
#              /proc/sys/vm/drop_caches is writable; "cache_dropped" says whether it was) and
#              warm (read again). Against the same total bytes in files of the same size in
#              the same directory read sequentially by one `cat` (cold and warm), and by `dd`
#              (bs=1M) from one file of the total size (cold).
#   L3 Redis — a redis-server started here on loopback (cluster mode, one master owning every
#              slot): the same objects written and read back through RedisClusterStore with
#              get_many() of BATCH keys (one pipelined round trip), against
#              `redis-benchmark -t set,get -d BYTES -P BATCH -c 1 -n OBJECTS` (one connection,
#              the same pipeline depth) on the same server.
# Prints one JSON line: every figure in GB/s (1e9 bytes/s) and the ratios store / baseline.
# Run it on a quiet machine (check `uptime`): the figures are only as good as the machine is
# idle. Needs a build (fathom), redis-server, redis-cli and redis-benchmark.
# Usage: bench/kv_store_throughput.sh [BUILD_DIR] [OBJECTS] [BYTES] [BATCH]
#   e.g. bench/kv_store_throughput.sh build 512          (512 x 819,884 B = 420 MB)
#   TMPDIR picks the disk the L2 figures are for.
set -euo pipefail
build=${1:-build}
objects=${2:-256}
here=$(cd "$(dirname "$0")/.." && pwd)
fathom="$build/fathom"
bytes=${3:-$("$fathom" inspect --config "$here/tests/data/model/v41_flash_config.json" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["kv_store"]["block_object_bytes"])')}
batch=${4:-16}
work=$(mktemp -d "${TMPDIR:-/tmp}/fathom-kv-throughput.XXXXXX")
redis_pid=
cleanup() {
  if [[ -n $redis_pid ]]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

now() { date +%s.%N; }
gbps() { python3 -c "import sys; b,s=float(sys.argv[1]),float(sys.argv[2]); print('%.4f' % (b/s/1e9))" "$1" "$2"; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }
dropped=false
drop_caches() {
  sync
  if [[ $(id -u) == 0 ]] && { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then dropped=true; else dropped=false; fi
}
total=$((objects * bytes))

# --- L2: DiskStore against cat / dd of the same bytes in the same directory.
"$fathom" bench kvstore --dir "$work/store" --objects "$objects" --bytes "$bytes" --phase write >/dev/null
drop_caches
cold=$("$fathom" bench kvstore --dir "$work/store" --objects "$objects" --bytes "$bytes" --batch "$batch" --phase read)
cold_dropped=$dropped
warm=$("$fathom" bench kvstore --dir "$work/store" --objects "$objects" --bytes "$bytes" --batch "$batch" --phase read)
mkdir -p "$work/files"
head -c "$total" /dev/urandom >"$work/one_file"
(cd "$work/files" && split -b "$bytes" -a 6 "$work/one_file" obj.)
drop_caches
t0=$(now)
find "$work/files" -type f -print0 | xargs -0 cat >/dev/null
cat_cold=$(gbps "$total" "$(python3 -c "print($(now) - $t0)")")
t0=$(now)
find "$work/files" -type f -print0 | xargs -0 cat >/dev/null
cat_warm=$(gbps "$total" "$(python3 -c "print($(now) - $t0)")")
drop_caches
t0=$(now)
dd if="$work/one_file" of=/dev/null bs=1M status=none
dd_cold=$(gbps "$total" "$(python3 -c "print($(now) - $t0)")")
rm -rf "$work/files" "$work/one_file" "$work/store"

# --- L3: RedisClusterStore (pipelined get_many) against redis-benchmark on one loopback server.
port=$((26000 + $$ % 3000))
mkdir -p "$work/redis"
redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" --save '' --appendonly no \
  --cluster-enabled yes --cluster-config-file nodes.conf --cluster-announce-ip 127.0.0.1 \
  --maxmemory 0 >"$work/redis/log" 2>&1 &
redis_pid=$!
for i in $(seq 100); do
  redis-cli -p "$port" PING 2>/dev/null | grep -q PONG && break
  sleep 0.05
done
redis-cli -p "$port" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
for i in $(seq 200); do
  redis-cli -p "$port" CLUSTER INFO | grep -q cluster_state:ok && break
  sleep 0.05
done
node="127.0.0.1:$port"
"$fathom" bench kvstore --redis "$node" --objects "$objects" --bytes "$bytes" --phase write >/dev/null
redis_read=$("$fathom" bench kvstore --redis "$node" --objects "$objects" --bytes "$bytes" --batch "$batch" --phase read)
rb=$(redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$bytes" -P "$batch" -c 1 -n "$objects" --csv |
  awk -F'"' '$2 == "GET" { print $4 }')
rb_gbps=$(python3 -c "print('%.4f' % ($rb * $bytes / 1e9))")

python3 - "$objects" "$bytes" "$batch" "$cold" "$warm" "$cold_dropped" "$cat_cold" "$cat_warm" \
  "$dd_cold" "$redis_read" "$rb_gbps" "$(uptime)" <<'EOF'
import json, sys
a = sys.argv[1:]
cold, warm, redis = json.loads(a[3]), json.loads(a[4]), json.loads(a[9])
f = lambda x: float(x)
out = {
    "objects": int(a[0]), "object_bytes": int(a[1]), "batch": int(a[2]), "cache_dropped": a[5] == "true",
    "disk_store_cold_gb_per_s": cold["gb_per_s"], "disk_store_warm_gb_per_s": warm["gb_per_s"],
    "files_cat_cold_gb_per_s": f(a[6]), "files_cat_warm_gb_per_s": f(a[7]), "dd_one_file_cold_gb_per_s": f(a[8]),
    "redis_store_gb_per_s": redis["gb_per_s"], "redis_store_round_trips": redis["round_trips"],
    "redis_benchmark_get_gb_per_s": f(a[10]),
}
ratio = lambda x, y: round(x / y, 3) if y > 0 else None
out["disk_cold_vs_cat"] = ratio(out["disk_store_cold_gb_per_s"], out["files_cat_cold_gb_per_s"])
out["disk_warm_vs_cat"] = ratio(out["disk_store_warm_gb_per_s"], out["files_cat_warm_gb_per_s"])
out["disk_cold_vs_dd"] = ratio(out["disk_store_cold_gb_per_s"], out["dd_one_file_cold_gb_per_s"])
out["redis_vs_redis_benchmark"] = ratio(out["redis_store_gb_per_s"], out["redis_benchmark_get_gb_per_s"])
out["load"] = a[11].split("load average:")[-1].strip()
print(json.dumps(out))
EOF
