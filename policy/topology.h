// Rank order for a placed gang: members whose hosts share topology labels get
// adjacent ranks, so collective rings cross the fewest links. Pure logic.
#ifndef GDT_POLICY_TOPOLOGY_H_
#define GDT_POLICY_TOPOLOGY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gdt::policy {

// Labels from the widest domain to the narrowest; the host name is the
// narrowest of all and always applies.
inline const std::vector<std::string>& DefaultTopologyKeys() {
  static const std::vector<std::string> keys = {"rack", "switch",
                                                "nvlink_domain"};
  return keys;
}

struct RankInput {
  uint32_t member_index = 0;  // 1-based.
  std::string host;
  std::map<std::string, std::string> labels;  // Of `host`.
};

// Returns the member indices in rank order (element r has node rank r).
// Rank 0 is the member with the most peers in its own domains, compared
// narrowest first (same host, then the keys from last to first: NVLink
// domain, switch, rack), lowest member index on ties. The others follow so
// that members sharing a domain are adjacent at every level, rank 0's own
// domains first, then by label value and member index. A missing label
// counts as the empty value. Deterministic.
std::vector<uint32_t> OrderRanks(
    const std::vector<RankInput>& members,
    const std::vector<std::string>& keys = DefaultTopologyKeys());

}  // namespace gdt::policy

#endif  // GDT_POLICY_TOPOLOGY_H_
