// cat(parts...): a string from strings, C strings and numbers, built without iostreams.
#pragma once

#include <string>

namespace jaxmg {

// Strings are built without iostreams: on the GPU machines the process's libstdc++ locale
// facets differ from the ones this module is compiled against, and ostream numeric output crashed.
inline std::string str_of(const std::string& s) { return s; }
inline std::string str_of(const char* s) { return s; }
template <typename T>
std::string str_of(T v) {
  return std::to_string(v);
}
template <typename... Ts>
std::string cat(const Ts&... parts) {
  std::string out;
  (out.append(str_of(parts)), ...);
  return out;
}

}  // namespace jaxmg
