// The console's static files (console/web/), compiled into the gateway: no file is read at run
// time. The table is generated at build time by console/embed_assets.cmake.
#pragma once

#include <cstddef>
#include <string_view>

namespace gateway::console {

struct Asset {
  const char* name;          // its path under web/ ("index.html", "app.js")
  const char* content_type;  // from its extension
  const char* etag;          // quoted, from its SHA-256
  const unsigned char* data;
  std::size_t size;
};

// Every asset, ended by one whose name is null.
const Asset* assets();

// The asset with this name, or null.
inline const Asset* find_asset(std::string_view name) {
  for (const Asset* a = assets(); a->name; ++a)
    if (name == a->name) return a;
  return nullptr;
}

}  // namespace gateway::console
