#include "policy/topology.h"

#include <algorithm>
#include <tuple>

namespace gdt::policy {
namespace {

// The member's domain at each level, widest first, host last.
std::vector<std::string> Path(const RankInput& member,
                              const std::vector<std::string>& keys) {
  std::vector<std::string> path;
  path.reserve(keys.size() + 1);
  for (const std::string& key : keys) {
    auto it = member.labels.find(key);
    path.push_back(it == member.labels.end() ? std::string() : it->second);
  }
  path.push_back(member.host);
  return path;
}

// Peers sharing the member's domain, narrowest level first.
std::vector<int> Affinity(size_t self,
                          const std::vector<std::vector<std::string>>& paths) {
  const size_t levels = paths[self].size();
  std::vector<int> score(levels, 0);
  for (size_t other = 0; other < paths.size(); ++other) {
    if (other == self) continue;
    // Sharing a domain at level l means sharing every wider one too.
    for (size_t l = 0; l < levels; ++l) {
      if (!std::equal(paths[self].begin(), paths[self].begin() + l + 1,
                      paths[other].begin())) {
        break;
      }
      ++score[levels - 1 - l];
    }
  }
  return score;
}

}  // namespace

std::vector<uint32_t> OrderRanks(const std::vector<RankInput>& members,
                                 const std::vector<std::string>& keys) {
  std::vector<uint32_t> order;
  if (members.empty()) return order;
  std::vector<std::vector<std::string>> paths;
  paths.reserve(members.size());
  for (const RankInput& member : members) paths.push_back(Path(member, keys));

  size_t root = 0;
  std::vector<int> root_score = Affinity(0, paths);
  for (size_t i = 1; i < members.size(); ++i) {
    std::vector<int> score = Affinity(i, paths);
    if (score > root_score ||
        (score == root_score &&
         members[i].member_index < members[root].member_index)) {
      root = i;
      root_score = std::move(score);
    }
  }
  // Sort by path, where at each level rank 0's own domain comes first.
  std::vector<size_t> sorted(members.size());
  for (size_t i = 0; i < sorted.size(); ++i) sorted[i] = i;
  const std::vector<std::string>& root_path = paths[root];
  auto key = [&](size_t i) {
    std::vector<std::pair<bool, const std::string*>> k;
    k.reserve(paths[i].size());
    for (size_t l = 0; l < paths[i].size(); ++l) {
      k.emplace_back(paths[i][l] != root_path[l], &paths[i][l]);
    }
    return k;
  };
  std::sort(sorted.begin(), sorted.end(), [&](size_t a, size_t b) {
    if (a == root || b == root) return a == root && b != root;
    const auto ka = key(a);
    const auto kb = key(b);
    for (size_t l = 0; l < ka.size(); ++l) {
      if (ka[l].first != kb[l].first) return !ka[l].first;
      if (*ka[l].second != *kb[l].second) return *ka[l].second < *kb[l].second;
    }
    return members[a].member_index < members[b].member_index;
  });
  for (const size_t i : sorted) order.push_back(members[i].member_index);
  return order;
}

}  // namespace gdt::policy
