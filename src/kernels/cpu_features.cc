// CPU detection (cpuid, xgetbv, Linux's AMX tile permission) and the choice of the kernel
// path. Compiled for the baseline: it must run on any x86-64-v3 machine.
#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fathom::kernels {
namespace {

struct Features {
  bool avx2 = false, fma = false, f16c = false, bmi2 = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512vnni = false, avx512bf16 = false,
       avx512vbmi = false;
  bool amx_tile = false, amx_bf16 = false, amx_int8 = false, amx_permitted = false;
};

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

// Linux keeps AMX tile data off until a process asks for it (arch_prctl
// ARCH_REQ_XCOMP_PERM with XFEATURE_XTILEDATA); without the permission a tile instruction
// faults.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

Features detect() {
  Features f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  if (!osxsave) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;           // SSE + AVX state
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;         // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  if (!ymm_state) {
    f.fma = f.f16c = false;
    return f;
  }
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = b & (1u << 5);
  f.bmi2 = b & (1u << 8);
  if (zmm_state) {
    f.avx512f = b & (1u << 16);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
    f.avx512vbmi = c & (1u << 1);
  }
  if (tile_state) {
    f.amx_bf16 = d & (1u << 22);
    f.amx_tile = d & (1u << 24);
    f.amx_int8 = d & (1u << 25);
  }
  const unsigned max_sub = a;
  if (zmm_state && max_sub >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
    f.avx512bf16 = a & (1u << 5);
  if (f.amx_tile) f.amx_permitted = request_amx_permission();
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

}  // namespace

const char* cpu_path_name(CpuPath path) {
  switch (path) {
    case CpuPath::kAvx2:
      return "avx2";
    case CpuPath::kAvx512:
      return "avx512";
    case CpuPath::kAvx512Bf16:
      return "avx512bf16";
    case CpuPath::kAmx:
      return "amx";
  }
  return "?";
}

std::string cpu_path_missing(CpuPath path) {
  const Features& f = features();
  std::string missing;
  auto need = [&](bool have, const char* name) {
    if (!have) missing += missing.empty() ? std::string(name) : std::string(", ") + name;
  };
  need(f.avx2, "avx2");
  need(f.fma, "fma");
  need(f.f16c, "f16c");
  need(f.bmi2, "bmi2");
  if (path != CpuPath::kAvx2) {
    need(f.avx512f, "avx512f");
    need(f.avx512bw, "avx512bw");
    need(f.avx512vl, "avx512vl");
  }
  if (path == CpuPath::kAvx512Bf16 || path == CpuPath::kAmx) need(f.avx512bf16, "avx512bf16");
  if (path == CpuPath::kAmx) {
    need(f.avx512vbmi, "avx512vbmi");
    need(f.amx_tile, "amx-tile");
    need(f.amx_bf16, "amx-bf16");
    if (f.amx_tile && !f.amx_permitted) missing += missing.empty() ? "" : ", ";
    if (f.amx_tile && !f.amx_permitted) missing += "Linux's tile permission";
  }
  if (!missing.empty()) return "the CPU lacks " + missing;
  return "";
}

bool cpu_path_available(CpuPath path) { return cpu_path_missing(path).empty(); }

Result<CpuPath> select_cpu_path() {
  const char* env = std::getenv("FATHOM_CPU");
  if (env == nullptr || *env == '\0') {
    CpuPath widest = CpuPath::kAvx2;
    for (CpuPath p : kAllCpuPaths)
      if (cpu_path_available(p)) widest = p;
    return widest;
  }
  for (CpuPath p : kAllCpuPaths) {
    if (std::strcmp(env, cpu_path_name(p)) != 0) continue;
    if (!cpu_path_available(p))
      return unsupported(std::string("FATHOM_CPU=") + env + ": " + cpu_path_missing(p) +
                         " (detected: " + cpu_features_summary() + ")");
    return p;
  }
  return invalid_argument(std::string("FATHOM_CPU=") + env +
                          ": not a kernel path (use avx2, avx512, avx512bf16 or amx)");
}

CpuPath cpu_path() {
  static const CpuPath chosen = [] {
    Result<CpuPath> p = select_cpu_path();
    if (!p.is_ok()) {
      std::fprintf(stderr, "fathom: %s\n", p.status().message().c_str());
      std::exit(2);
    }
    return *p;
  }();
  return chosen;
}

std::string cpu_features_summary() {
  const Features& f = features();
  std::string s;
  auto add = [&](bool have, const char* name) {
    if (!have) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.bmi2, "bmi2");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512vnni, "avx512vnni");
  add(f.avx512vbmi, "avx512vbmi");
  add(f.avx512bf16, "avx512bf16");
  add(f.amx_tile, "amx-tile");
  add(f.amx_bf16, "amx-bf16");
  add(f.amx_int8, "amx-int8");
  if (f.amx_tile) s += f.amx_permitted ? " (tiles permitted)" : " (tile permission refused)";
  return s;
}

}  // namespace fathom::kernels
