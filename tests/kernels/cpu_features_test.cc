// The kernel path's selection: FATHOM_CPU names a path or is refused with the reason, and
// without it the widest available path is chosen.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "kernels/cpu_features.h"

namespace fathom::kernels {
namespace {

// Sets FATHOM_CPU for one scope and restores it after.
class ScopedCpuEnv {
 public:
  explicit ScopedCpuEnv(const char* value) {
    if (const char* old = std::getenv("FATHOM_CPU")) old_ = old;
    if (value)
      setenv("FATHOM_CPU", value, 1);
    else
      unsetenv("FATHOM_CPU");
  }
  ~ScopedCpuEnv() {
    if (old_.has_value())
      setenv("FATHOM_CPU", old_->c_str(), 1);
    else
      unsetenv("FATHOM_CPU");
  }
  ScopedCpuEnv(const ScopedCpuEnv&) = delete;
  ScopedCpuEnv& operator=(const ScopedCpuEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

TEST(CpuPath, WidestAvailableUnlessForced) {
  std::printf("cpu features: %s\n", cpu_features_summary().c_str());
  ASSERT_TRUE(cpu_path_available(CpuPath::kAvx2)) << cpu_path_missing(CpuPath::kAvx2);
  CpuPath widest = CpuPath::kAvx2;
  for (CpuPath p : kAllCpuPaths)
    if (cpu_path_available(p)) widest = p;
  {
    ScopedCpuEnv env(nullptr);
    Result<CpuPath> p = select_cpu_path();
    ASSERT_TRUE(p.is_ok());
    EXPECT_EQ(*p, widest);
  }
  for (CpuPath want : kAllCpuPaths) {
    ScopedCpuEnv env(cpu_path_name(want));
    Result<CpuPath> p = select_cpu_path();
    if (cpu_path_available(want)) {
      ASSERT_TRUE(p.is_ok()) << p.status().to_string();
      EXPECT_EQ(*p, want);
    } else {
      ASSERT_FALSE(p.is_ok()) << cpu_path_name(want);
      EXPECT_EQ(p.status().code(), StatusCode::kUnsupported);
      EXPECT_NE(p.status().message().find(cpu_path_missing(want)), std::string::npos)
          << p.status().message();
    }
  }
}

TEST(CpuPath, UnknownNameIsRefused) {
  for (const char* bad : {"avx", "AVX2", "sse4", "avx512 "}) {
    ScopedCpuEnv env(bad);
    Result<CpuPath> p = select_cpu_path();
    ASSERT_FALSE(p.is_ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(p.status().message().find("avx2, avx512, avx512bf16 or amx"), std::string::npos);
  }
}

// The flags Linux reports in /proc/cpuinfo (an independent reading of cpuid and of the
// register state the kernel enables).
std::string cpuinfo_flags() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "";
  char line[8192];
  std::string flags;
  while (std::fgets(line, sizeof line, f))
    if (std::string(line).rfind("flags", 0) == 0) {
      flags = std::string(line) + " ";
      break;
    }
  std::fclose(f);
  return flags;
}

TEST(CpuPath, AvailabilityFollowsTheFlagsLinuxReports) {
  const std::string flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo";
  auto has = [&](const char* f) {
    return flags.find(std::string(" ") + f + " ") != std::string::npos;
  };
  const bool avx512 = has("avx512f") && has("avx512bw") && has("avx512vl");
  EXPECT_EQ(cpu_path_available(CpuPath::kAvx512), avx512) << cpu_path_missing(CpuPath::kAvx512);
  const bool avx512bf16 = avx512 && has("avx512_bf16");
  EXPECT_EQ(cpu_path_available(CpuPath::kAvx512Bf16), avx512bf16)
      << cpu_path_missing(CpuPath::kAvx512Bf16);
  // Linux lists amx_tile only when it supports the tile state (and grants the permission).
  const bool amx =
      avx512 && has("avx512_bf16") && has("avx512vbmi") && has("amx_tile") && has("amx_bf16");
  EXPECT_EQ(cpu_path_available(CpuPath::kAmx), amx) << cpu_path_missing(CpuPath::kAmx);
  if (!amx) {
    EXPECT_NE(cpu_path_missing(CpuPath::kAmx).find("the CPU lacks"), std::string::npos);
  }
  std::printf("paths: avx512 %s, avx512bf16 %s, amx %s (%s)\n", avx512 ? "yes" : "no",
              avx512bf16 ? "yes" : "no", amx ? "yes" : "no", cpu_features_summary().c_str());
}

}  // namespace
}  // namespace fathom::kernels
