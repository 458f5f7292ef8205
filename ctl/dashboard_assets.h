#ifndef GDT_CTL_DASHBOARD_ASSETS_H_
#define GDT_CTL_DASHBOARD_ASSETS_H_

#include <span>
#include <string_view>

namespace gdt::ctl {

// One file of the dashboard page, built into the binary from
// ctl/dashboard/ by cmake/EmbedFiles.cmake.
struct DashboardAsset {
  std::string_view path;  // "/index.html", "/dashboard.js", ...
  std::string_view content_type;
  std::string_view content;
};

std::span<const DashboardAsset> DashboardAssets();

}  // namespace gdt::ctl

#endif  // GDT_CTL_DASHBOARD_ASSETS_H_
