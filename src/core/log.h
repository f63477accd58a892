// Minimal leveled logging to stderr. Thread-safe: each call writes one whole line.
// The level is process-wide; set it once at startup (FATHOM_LOG=debug|info|warn|error).
#pragma once

#include <string_view>

namespace fathom {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_line(LogLevel level, std::string_view message);

inline void log_debug(std::string_view m) { log_line(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log_line(LogLevel::kInfo, m); }
inline void log_warn(std::string_view m) { log_line(LogLevel::kWarn, m); }
inline void log_error(std::string_view m) { log_line(LogLevel::kError, m); }

}  // namespace fathom
