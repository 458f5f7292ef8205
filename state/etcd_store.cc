#include "state/etcd_store.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace gdt::state {
namespace {

using Json = nlohmann::json;

// Names and ids become one key segment.
std::string Escape(const std::string& name) {
  std::string escaped;
  for (char c : name) {
    if (c == '%') {
      escaped += "%25";
    } else if (c == '/') {
      escaped += "%2F";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

Json HostToJson(const Host& host) {
  Json gpus = Json::array();
  for (const GpuInfo& gpu : host.spec.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"uuid", gpu.uuid},
                    {"model", gpu.model},
                    {"memory_bytes", gpu.memory_bytes}});
  }
  return {{"name", host.spec.name},
          {"address", host.spec.address},
          {"agent_endpoint", host.spec.agent_endpoint},
          {"gpus", gpus},
          {"labels", host.spec.labels},
          {"network_interface", host.spec.network_interface},
          {"cpu_slots", host.spec.cpu_slots},
          {"runner_slots", host.spec.runner_slots},
          {"last_heartbeat_unix_ms", host.last_heartbeat_unix_ms}};
}

Host HostFromJson(const Json& json) {
  Host host;
  host.spec.name = json.at("name").get<std::string>();
  host.spec.address = json.at("address").get<std::string>();
  host.spec.agent_endpoint = json.at("agent_endpoint").get<std::string>();
  for (const Json& gpu : json.at("gpus")) {
    host.spec.gpus.push_back(GpuInfo{gpu.at("index").get<uint32_t>(),
                                     gpu.at("uuid").get<std::string>(),
                                     gpu.at("model").get<std::string>(),
                                     gpu.at("memory_bytes").get<uint64_t>()});
  }
  host.spec.labels =
      json.at("labels").get<std::map<std::string, std::string>>();
  host.spec.network_interface = json.at("network_interface").get<std::string>();
  host.spec.cpu_slots = json.at("cpu_slots").get<uint32_t>();
  host.spec.runner_slots = json.at("runner_slots").get<uint32_t>();
  host.last_heartbeat_unix_ms =
      json.at("last_heartbeat_unix_ms").get<int64_t>();
  return host;
}

// An elastic gang's members left out, as {"index": job id}.
Json NotNeededJson(const std::map<uint32_t, int64_t>& not_needed) {
  Json object = Json::object();
  for (const auto& [index, job_id] : not_needed) {
    object[std::to_string(index)] = job_id;
  }
  return object;
}

// A preemption under way while the gang runs, else null.
Json PreemptingJson(const Gang& gang) {
  if (gang.state != GangState::kRunning || gang.preempt_notice_ms == 0) {
    return nullptr;
  }
  return {
      {"notice_ms", gang.preempt_notice_ms},
      {"stop_by_ms", gang.preempt_stop_by_ms},
      {"checkpoint_ms", gang.preempt_checkpoint_ms},
      {"by", gang.preempt_by},
      {"by_priority", gang.preempt_by_priority},
      {"estimate_gpu_seconds", static_cast<int64_t>(std::llround(
                                   gang.preempt_estimate_gpu_hours * 3600.0))}};
}

Json GangToJson(const Gang& gang) {
  return {{"id", gang.id},
          {"instance", gang.key.instance},
          {"project_id", gang.key.project_id},
          {"pipeline_id", gang.key.pipeline_id},
          {"group_name", gang.key.group_name},
          {"size", gang.key.size},
          {"state", static_cast<int>(gang.state)},
          {"epoch", gang.epoch},
          {"reason", gang.reason},
          {"master_host", gang.master_host},
          {"master_addr", gang.master_addr},
          {"master_port", gang.master_port},
          {"created_unix_ms", gang.created_unix_ms},
          {"sequence", gang.sequence},
          {"preemptions", gang.preemptions},
          {"preempted_epoch", gang.preempted_epoch},
          {"preempted_by", gang.preempted_by},
          {"preempted_lost_gpu_seconds", gang.preempted_lost_gpu_seconds},
          {"nodes_min", gang.nodes_min},
          {"not_needed", NotNeededJson(gang.not_needed)},
          {"ended_unix_ms", gang.ended_unix_ms},
          {"preempting", PreemptingJson(gang)}};
}

absl::StatusOr<Gang> GangFromJson(const Json& json) {
  Gang gang;
  gang.id = json.at("id").get<std::string>();
  gang.key.instance = json.at("instance").get<std::string>();
  gang.key.project_id = json.at("project_id").get<int64_t>();
  gang.key.pipeline_id = json.at("pipeline_id").get<int64_t>();
  gang.key.group_name = json.at("group_name").get<std::string>();
  gang.key.size = json.at("size").get<uint32_t>();
  absl::StatusOr<GangState> state =
      GangStateFromStored(json.at("state").get<int64_t>(), gang.id);
  if (!state.ok()) return state.status();
  gang.state = *state;
  gang.epoch = json.at("epoch").get<uint32_t>();
  gang.reason = json.at("reason").get<std::string>();
  gang.master_host = json.at("master_host").get<std::string>();
  gang.master_addr = json.at("master_addr").get<std::string>();
  gang.master_port = json.at("master_port").get<uint32_t>();
  gang.created_unix_ms = json.at("created_unix_ms").get<int64_t>();
  gang.sequence = json.at("sequence").get<int64_t>();
  // Records written before gangs could be preempted lack these fields.
  gang.preemptions = json.value("preemptions", 0u);
  gang.preempted_epoch = json.value("preempted_epoch", 0u);
  gang.preempted_by = json.value("preempted_by", std::string());
  gang.preempted_lost_gpu_seconds =
      json.value("preempted_lost_gpu_seconds", int64_t{0});
  if (const auto found = json.find("preempting");
      found != json.end() && found->is_object()) {
    gang.preempt_notice_ms = found->value("notice_ms", int64_t{0});
    gang.preempt_stop_by_ms = found->value("stop_by_ms", int64_t{0});
    gang.preempt_checkpoint_ms = found->value("checkpoint_ms", int64_t{0});
    gang.preempt_by = found->value("by", std::string());
    gang.preempt_by_priority = found->value("by_priority", 0);
    gang.preempt_estimate_gpu_hours =
        static_cast<double>(found->value("estimate_gpu_seconds", int64_t{0})) /
        3600.0;
  }
  // Records written before the end time was kept lack it: 0, unknown.
  gang.ended_unix_ms = json.value("ended_unix_ms", int64_t{0});
  // Records written before elastic gangs lack these fields: fixed-size.
  gang.nodes_min = json.value("nodes_min", 0u);
  if (const auto found = json.find("not_needed");
      found != json.end() && found->is_object()) {
    for (const auto& [index, job_id] : found->items()) {
      uint32_t member_index = 0;
      if (absl::SimpleAtoi(index, &member_index)) {
        gang.not_needed[member_index] = job_id.get<int64_t>();
      }
    }
  }
  return gang;
}

Json MemberToJson(const std::string& gang_id, const Member& member) {
  return {{"gang_id", gang_id},
          {"index", member.index},
          {"job_id", member.job_id},
          {"job_name", member.job_name},
          {"gpus_per_node", member.gpus_per_node},
          {"procs_per_node", member.procs_per_node},
          {"launcher", member.launcher},
          {"arrival_host", member.arrival_host},
          {"job_timeout_seconds", member.job_timeout_seconds},
          {"left", member.left},
          {"node_rank", member.node_rank},
          {"host_name", member.host_name},
          {"gpu_indices", member.gpu_indices},
          {"exit_code", member.exit_code},
          {"preemptible", member.preemptible}};
}

Member MemberFromJson(const Json& json) {
  Member member;
  member.index = json.at("index").get<uint32_t>();
  member.job_id = json.at("job_id").get<int64_t>();
  member.job_name = json.at("job_name").get<std::string>();
  member.gpus_per_node = json.at("gpus_per_node").get<uint32_t>();
  member.procs_per_node = json.at("procs_per_node").get<uint32_t>();
  member.launcher = json.at("launcher").get<int>();
  member.arrival_host = json.at("arrival_host").get<std::string>();
  member.job_timeout_seconds = json.at("job_timeout_seconds").get<uint32_t>();
  member.left = json.at("left").get<bool>();
  member.node_rank = json.at("node_rank").get<int32_t>();
  member.host_name = json.at("host_name").get<std::string>();
  member.gpu_indices = json.at("gpu_indices").get<std::vector<uint32_t>>();
  member.exit_code = json.at("exit_code").get<int32_t>();
  // Records written before members could be preemptible lack the field.
  member.preemptible = json.value("preemptible", false);
  return member;
}

// The columns of a roster's rows, in order (see RosterToJson).
constexpr const char* kRosterColumns[] = {
    "index",          "job_id",     "job_name",     "gpus_per_node",
    "procs_per_node", "launcher",   "arrival_host", "job_timeout_seconds",
    "left",           "node_rank",  "host_name",    "gpu_indices",
    "exit_code",      "preemptible"};

// A gang's members and leases as SaveGang writes them: one value, so that
// the admission of a gang of any size is a handful of operations. Members
// are rows under named columns (a reader maps them by name, so a column
// added later is read as its default by this version and left out rows by
// the next). "holds_leases": the gang was running, so every GPU of every
// member row is leased to it; "port": its port lease.
Json RosterToJson(const Gang& gang) {
  Json rows = Json::array();
  for (const auto& [index, member] : gang.members) {
    rows.push_back(Json::array(
        {member.index, member.job_id, member.job_name, member.gpus_per_node,
         member.procs_per_node, member.launcher, member.arrival_host,
         member.job_timeout_seconds, member.left, member.node_rank,
         member.host_name, member.gpu_indices, member.exit_code,
         member.preemptible}));
  }
  Json columns = Json::array();
  for (const char* column : kRosterColumns) columns.push_back(column);
  Json roster = {{"gang_id", gang.id},
                 {"columns", columns},
                 {"members", rows},
                 {"holds_leases", gang.state == GangState::kRunning}};
  if (gang.state == GangState::kRunning && gang.master_port != 0) {
    roster["port"] = {{"host", gang.master_host}, {"port", gang.master_port}};
  }
  return roster;
}

// One roster row back into a member, through the column names.
Member MemberFromRow(const Json& columns, const Json& row) {
  Json object = Json::object();
  for (size_t i = 0; i < columns.size() && i < row.size(); ++i) {
    object[columns.at(i).get<std::string>()] = row.at(i);
  }
  return MemberFromJson(object);
}

// Keys per range request of Load(): small records, and rosters, which can
// be 0.5 MB each (4,096 members) up to etcd's 1.5 MiB request limit, so that
// no answer comes near EtcdClient's 256 MiB.
constexpr int64_t kLoadPageKeys = 500;
constexpr int64_t kLoadPageRosters = 100;

bool ValidCluster(const std::string& cluster) {
  if (cluster.empty()) return false;
  return std::all_of(cluster.begin(), cluster.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Open(
    std::shared_ptr<EtcdClient> client, const std::string& cluster) {
  if (!ValidCluster(cluster)) {
    return absl::InvalidArgumentError(
        absl::StrCat("etcd cluster name '", cluster,
                     "' must be non-empty letters, digits, '-', '_' or '.'"));
  }
  return std::unique_ptr<EtcdStore>(
      new EtcdStore(std::move(client), Prefix(cluster)));
}

std::string EtcdStore::Prefix(const std::string& cluster) {
  return absl::StrCat("/gdt/", cluster, "/");
}

void EtcdStore::SetFence(const std::string& key, int64_t create_revision) {
  fence_key_ = key;
  fence_revision_ = create_revision;
}

std::string EtcdStore::Key(const char* kind, const std::string& name) const {
  return absl::StrCat(prefix_, kind, "/", Escape(name));
}

std::string EtcdStore::MemberKey(const std::string& gang_id,
                                 uint32_t index) const {
  return absl::StrCat(Key("members", gang_id), "/",
                      absl::StrFormat("%010u", index));
}

absl::Status EtcdStore::Write(const Json& ops, const std::string& what) {
  Json compare = Json::array();
  if (!fence_key_.empty()) {
    compare.push_back(
        EtcdClient::CreateRevisionIs(fence_key_, fence_revision_));
  }
  absl::StatusOr<EtcdTxnResult> result =
      client_->Txn(compare, ops, Json::array());
  if (!result.ok()) {
    const bool too_large =
        absl::StrContains(result.status().message(), "request is too large");
    return absl::Status(
        result.status().code(),
        absl::StrCat("cannot save ", what,
                     " in etcd: ", result.status().message(),
                     too_large ? " (raise etcd's --max-request-bytes)" : ""));
  }
  if (!result->succeeded) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot save ", what, ": this coordinator is no longer the leader (",
        fence_key_, " changed)"));
  }
  return absl::OkStatus();
}

absl::Status EtcdStore::SaveHost(const Host& host) {
  return Write(Json::array({EtcdClient::Put(Key("hosts", host.spec.name),
                                            HostToJson(host).dump())}),
               absl::StrCat("host ", host.spec.name));
}

absl::Status EtcdStore::SetHostDrained(const std::string& name, bool drained) {
  const std::string key = Key("drained", name);
  return Write(Json::array({drained ? EtcdClient::Put(key, "1")
                                    : EtcdClient::Delete(key)}),
               absl::StrCat("the drain of host ", name));
}

absl::Status EtcdStore::DeleteHost(const std::string& name) {
  return Write(Json::array({EtcdClient::Delete(Key("hosts", name)),
                            EtcdClient::Delete(Key("drained", name))}),
               absl::StrCat("the removal of host ", name));
}

absl::Status EtcdStore::SaveGang(const Gang& gang) {
  // Four operations whatever the gang's size (etcd allows 128 per
  // transaction by default): the record, the roster with the leases, and
  // the removal of the member records SaveMember wrote since the last
  // SaveGang (the roster now holds them) and of a lease record an older
  // gdt-coord wrote.
  return Write(
      Json::array(
          {EtcdClient::Put(Key("gangs", gang.id), GangToJson(gang).dump()),
           EtcdClient::Put(Key("rosters", gang.id), RosterToJson(gang).dump()),
           EtcdClient::DeletePrefix(Key("members", gang.id) + "/"),
           EtcdClient::Delete(Key("leases", gang.id))}),
      absl::StrCat("gang ", gang.id));
}

absl::Status EtcdStore::SaveMember(const Gang& gang, const Member& member) {
  return Write(
      Json::array(
          {EtcdClient::Put(Key("gangs", gang.id), GangToJson(gang).dump()),
           EtcdClient::Put(MemberKey(gang.id, member.index),
                           MemberToJson(gang.id, member).dump())}),
      absl::StrCat("gang ", gang.id));
}

absl::Status EtcdStore::DeleteGang(const std::string& gang_id) {
  return Write(
      Json::array(
          {EtcdClient::Delete(Key("gangs", gang_id)),
           EtcdClient::Delete(Key("rosters", gang_id)),
           EtcdClient::DeletePrefix(Key("members", gang_id) + "/"),
           EtcdClient::Delete(Key("leases", gang_id)),
           EtcdClient::Delete(Key("kv_tokens", gang_id)),
           EtcdClient::DeletePrefix(Key("checkpoints", gang_id) + "/")}),
      absl::StrCat("the removal of gang ", gang_id));
}

absl::StatusOr<StoredState> EtcdStore::Load() {
  // Only the kinds the state is made of, page by page at one revision: the
  // tokens, checkpoint records and secrets beside them are read elsewhere,
  // and no single answer grows with the number of gangs. A compaction of
  // that revision meanwhile starts the read again.
  constexpr const char* kKinds[] = {"hosts",   "drained", "gangs",
                                    "rosters", "members", "leases"};
  std::map<std::string, std::vector<EtcdKeyValue>> kinds;
  for (int attempt = 0;; ++attempt) {
    kinds.clear();
    int64_t revision = 0;
    absl::Status read = absl::OkStatus();
    for (const char* kind : kKinds) {
      absl::StatusOr<EtcdRangePages> pages = client_->RangePages(
          absl::StrCat(prefix_, kind, "/"),
          std::string_view(kind) == "rosters" ? kLoadPageRosters
                                              : kLoadPageKeys,
          revision);
      if (!pages.ok()) {
        read = pages.status();
        break;
      }
      revision = pages->revision;
      kinds[kind] = std::move(pages->kvs);
    }
    if (read.ok()) break;
    if (attempt < 2 && absl::StrContains(read.message(), "compacted")) {
      continue;
    }
    return absl::Status(read.code(),
                        absl::StrCat("cannot load the state from etcd under ",
                                     prefix_, ": ", read.message()));
  }
  StoredState state;
  std::set<std::string> drained;
  // By gang id: the roster's members, then the member records written
  // since (SaveMember), which replace them by index.
  std::map<std::string, std::map<uint32_t, Member>> members;
  try {
    for (const EtcdKeyValue& kv : kinds["drained"]) {
      drained.insert(kv.key.substr(absl::StrCat(prefix_, "drained/").size()));
    }
    for (const EtcdKeyValue& kv : kinds["hosts"]) {
      state.hosts.push_back(HostFromJson(Json::parse(kv.value)));
    }
    for (const EtcdKeyValue& kv : kinds["gangs"]) {
      absl::StatusOr<Gang> gang = GangFromJson(Json::parse(kv.value));
      if (!gang.ok()) return gang.status();
      state.gangs.push_back(*std::move(gang));
    }
    for (const EtcdKeyValue& kv : kinds["rosters"]) {
      const Json value = Json::parse(kv.value);
      const std::string gang_id = value.at("gang_id").get<std::string>();
      const Json& columns = value.at("columns");
      std::map<uint32_t, Member>& gang_members = members[gang_id];
      for (const Json& row : value.at("members")) {
        Member member = MemberFromRow(columns, row);
        if (value.value("holds_leases", false)) {
          for (uint32_t gpu : member.gpu_indices) {
            state.gpu_leases.push_back(
                GpuLease{member.host_name, gpu, gang_id, member.index});
          }
        }
        const uint32_t index = member.index;
        gang_members[index] = std::move(member);
      }
      if (value.contains("port")) {
        const Json& port = value.at("port");
        state.port_leases.push_back(
            PortLease{port.at("host").get<std::string>(),
                      port.at("port").get<uint32_t>(), gang_id});
      }
    }
    for (const EtcdKeyValue& kv : kinds["members"]) {
      const Json value = Json::parse(kv.value);
      Member member = MemberFromJson(value);
      const uint32_t index = member.index;
      members[value.at("gang_id").get<std::string>()][index] =
          std::move(member);
    }
    // Lease records of gangs that an older gdt-coord saved last (it kept
    // the leases apart from the members); the next SaveGang removes them.
    for (const EtcdKeyValue& kv : kinds["leases"]) {
      const Json value = Json::parse(kv.value);
      const std::string gang_id = value.at("gang_id").get<std::string>();
      for (const Json& gpu : value.at("gpus")) {
        state.gpu_leases.push_back(GpuLease{
            gpu.at("host").get<std::string>(), gpu.at("gpu").get<uint32_t>(),
            gang_id, gpu.at("member").get<uint32_t>()});
      }
      if (value.contains("port")) {
        const Json& port = value.at("port");
        state.port_leases.push_back(
            PortLease{port.at("host").get<std::string>(),
                      port.at("port").get<uint32_t>(), gang_id});
      }
    }
  } catch (const nlohmann::json::exception& e) {
    // Values were written by this file, so a parse failure is corruption.
    return absl::DataLossError(
        absl::StrCat("corrupt state in etcd under ", prefix_, ": ", e.what()));
  }
  for (Host& host : state.hosts) {
    host.drained = drained.contains(Escape(host.spec.name));
  }
  std::sort(
      state.hosts.begin(), state.hosts.end(),
      [](const Host& a, const Host& b) { return a.spec.name < b.spec.name; });
  std::sort(
      state.gangs.begin(), state.gangs.end(),
      [](const Gang& a, const Gang& b) { return a.sequence < b.sequence; });
  std::map<std::string, size_t> positions;
  for (size_t i = 0; i < state.gangs.size(); ++i) {
    positions[state.gangs[i].id] = i;
  }
  for (auto& [gang_id, gang_members] : members) {
    auto position = positions.find(gang_id);
    if (position == positions.end()) {
      return absl::DataLossError(
          absl::StrCat("member of unknown gang ", gang_id));
    }
    state.gangs[position->second].members = std::move(gang_members);
  }
  std::sort(state.gpu_leases.begin(), state.gpu_leases.end(),
            [](const GpuLease& a, const GpuLease& b) {
              return std::tie(a.host_name, a.gpu_index) <
                     std::tie(b.host_name, b.gpu_index);
            });
  std::sort(state.port_leases.begin(), state.port_leases.end(),
            [](const PortLease& a, const PortLease& b) {
              return std::tie(a.host_name, a.port) <
                     std::tie(b.host_name, b.port);
            });
  return state;
}

// Gang key-value store tokens.

absl::Status EtcdStore::SaveKvToken(const KvToken& token) {
  Json earlier = Json::object();
  for (const auto& [epoch, sha256] : token.earlier_sha256) {
    earlier[std::to_string(epoch)] = sha256;
  }
  const Json value = {{"gang_id", token.gang_id},
                      {"epoch", token.epoch},
                      {"token", token.token},
                      {"earlier_sha256", earlier}};
  return Write(Json::array({EtcdClient::Put(Key("kv_tokens", token.gang_id),
                                            value.dump())}),
               absl::StrCat("the kv token of ", token.gang_id));
}

absl::Status EtcdStore::DeleteKvToken(const std::string& gang_id) {
  return Write(Json::array({EtcdClient::Delete(Key("kv_tokens", gang_id))}),
               absl::StrCat("the removal of the kv token of ", gang_id));
}

absl::StatusOr<std::vector<KvToken>> EtcdStore::LoadKvTokens() {
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs =
      client_->Range(absl::StrCat(prefix_, "kv_tokens/"), /*prefix=*/true,
                     /*keys_only=*/false);
  if (!kvs.ok()) return kvs.status();
  std::vector<KvToken> tokens;
  try {
    for (const EtcdKeyValue& kv : *kvs) {
      const Json value = Json::parse(kv.value);
      KvToken token{value.at("gang_id").get<std::string>(),
                    value.at("epoch").get<uint32_t>(),
                    value.at("token").get<std::string>(),
                    {}};
      // Written by older coordinators without it.
      if (value.contains("earlier_sha256")) {
        for (const auto& [key, sha256] : value.at("earlier_sha256").items()) {
          uint32_t epoch = 0;
          if (!absl::SimpleAtoi(key, &epoch)) {
            return absl::DataLossError(absl::StrCat(
                "corrupt kv token in etcd: earlier epoch '", key, "'"));
          }
          token.earlier_sha256[epoch] = sha256.get<std::string>();
        }
      }
      tokens.push_back(std::move(token));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("corrupt kv token in etcd: ", e.what()));
  }
  std::sort(
      tokens.begin(), tokens.end(),
      [](const KvToken& a, const KvToken& b) { return a.gang_id < b.gang_id; });
  return tokens;
}

// Checkpoint manifest records.

absl::StatusOr<std::vector<std::pair<std::string, CheckpointRecord>>>
EtcdStore::CheckpointRecordsWithKeys(const std::string& gang_id) {
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs = client_->Range(
      Key("checkpoints", gang_id) + "/", /*prefix=*/true, /*keys_only=*/false);
  if (!kvs.ok()) return kvs.status();
  std::vector<std::tuple<int64_t, int64_t, std::string, CheckpointRecord>>
      found;
  try {
    for (const EtcdKeyValue& kv : *kvs) {
      const Json value = Json::parse(kv.value);
      CheckpointRecord record;
      record.gang_id = value.at("gang_id").get<std::string>();
      record.epoch = value.at("epoch").get<uint32_t>();
      record.step = value.at("step").get<int64_t>();
      record.rank = value.at("rank").get<uint32_t>();
      record.job_id = value.at("job_id").get<int64_t>();
      record.manifest_json = value.at("manifest").get<std::string>();
      record.recorded_unix_ms = value.at("recorded_unix_ms").get<int64_t>();
      found.emplace_back(record.step, kv.create_revision, kv.key,
                         std::move(record));
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("corrupt checkpoint record in etcd: ", e.what()));
  }
  // Highest step first, then the latest written.
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) >
           std::tie(std::get<0>(b), std::get<1>(b));
  });
  std::vector<std::pair<std::string, CheckpointRecord>> records;
  records.reserve(found.size());
  for (auto& [step, revision, key, record] : found) {
    records.emplace_back(std::move(key), std::move(record));
  }
  return records;
}

absl::Status EtcdStore::SaveCheckpointRecord(const CheckpointRecord& record,
                                             size_t keep_per_gang) {
  absl::StatusOr<std::vector<std::pair<std::string, CheckpointRecord>>>
      existing = CheckpointRecordsWithKeys(record.gang_id);
  if (!existing.ok()) return existing.status();
  const Json value = {{"gang_id", record.gang_id},
                      {"epoch", record.epoch},
                      {"step", record.step},
                      {"rank", record.rank},
                      {"job_id", record.job_id},
                      {"manifest", record.manifest_json},
                      {"recorded_unix_ms", record.recorded_unix_ms}};
  const std::string key = absl::StrFormat(
      "%s/%020d/%016d-%010d-%020d", Key("checkpoints", record.gang_id),
      std::max<int64_t>(0, record.step),
      std::max<int64_t>(0, record.recorded_unix_ms), record.rank,
      std::max<int64_t>(0, record.job_id));
  // Newest first with the new record in its place: before every existing
  // one of a lower or equal step (it is the latest written). Everything
  // past the first `keep_per_gang` goes, the new record included.
  std::vector<const std::string*> order;  // nullptr: the new record.
  bool placed = false;
  for (const auto& [old_key, old] : *existing) {
    if (!placed && record.step >= old.step) {
      order.push_back(nullptr);
      placed = true;
    }
    if (old_key != key) order.push_back(&old_key);  // Else replaced.
  }
  if (!placed) order.push_back(nullptr);
  Json ops = Json::array();
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] == nullptr) {
      if (i < keep_per_gang) ops.push_back(EtcdClient::Put(key, value.dump()));
    } else if (i >= keep_per_gang) {
      ops.push_back(EtcdClient::Delete(*order[i]));
    }
  }
  if (ops.empty()) return absl::OkStatus();
  return Write(ops, absl::StrCat("a checkpoint of ", record.gang_id));
}

absl::StatusOr<std::vector<CheckpointRecord>> EtcdStore::ListCheckpointRecords(
    const std::string& gang_id) {
  absl::StatusOr<std::vector<std::pair<std::string, CheckpointRecord>>>
      records = CheckpointRecordsWithKeys(gang_id);
  if (!records.ok()) return records.status();
  std::vector<CheckpointRecord> out;
  out.reserve(records->size());
  for (auto& [key, record] : *records) out.push_back(std::move(record));
  return out;
}

absl::Status EtcdStore::DeleteCheckpointRecords(const std::string& gang_id) {
  return Write(Json::array({EtcdClient::DeletePrefix(
                   Key("checkpoints", gang_id) + "/")}),
               absl::StrCat("the removal of the checkpoints of ", gang_id));
}

// Host tokens.

absl::Status EtcdStore::SaveHostToken(const HostTokenRecord& record) {
  const Json value = {{"host_name", record.host_name},
                      {"sha256", record.sha256},
                      {"created_unix_ms", record.created_unix_ms}};
  return Write(Json::array({EtcdClient::Put(
                   Key("host_tokens", record.host_name), value.dump())}),
               absl::StrCat("the host token of ", record.host_name));
}

absl::StatusOr<bool> EtcdStore::DeleteHostToken(const std::string& host_name) {
  const std::string key = Key("host_tokens", host_name);
  absl::StatusOr<std::vector<EtcdKeyValue>> existing =
      client_->Range(key, /*prefix=*/false, /*keys_only=*/true);
  if (!existing.ok()) return existing.status();
  if (existing->empty()) return false;
  GDT_RETURN_IF_ERROR(
      Write(Json::array({EtcdClient::Delete(key)}),
            absl::StrCat("the removal of the host token of ", host_name)));
  return true;
}

absl::StatusOr<std::vector<HostTokenRecord>> EtcdStore::LoadHostTokens() {
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs =
      client_->Range(absl::StrCat(prefix_, "host_tokens/"), /*prefix=*/true,
                     /*keys_only=*/false);
  if (!kvs.ok()) return kvs.status();
  std::vector<HostTokenRecord> records;
  try {
    for (const EtcdKeyValue& kv : *kvs) {
      const Json value = Json::parse(kv.value);
      records.push_back(
          HostTokenRecord{value.at("host_name").get<std::string>(),
                          value.at("sha256").get<std::string>(),
                          value.at("created_unix_ms").get<int64_t>()});
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        absl::StrCat("corrupt host token in etcd: ", e.what()));
  }
  std::sort(records.begin(), records.end(),
            [](const HostTokenRecord& a, const HostTokenRecord& b) {
              return a.host_name < b.host_name;
            });
  return records;
}

// Coordinator secrets.

absl::Status EtcdStore::SaveSecret(const std::string& name,
                                   const std::string& value) {
  return Write(Json::array({EtcdClient::Put(Key("secrets", name), value)}),
               absl::StrCat("the coordinator secret ", name));
}

absl::StatusOr<std::string> EtcdStore::LoadSecret(const std::string& name) {
  absl::StatusOr<std::vector<EtcdKeyValue>> kvs =
      client_->Range(Key("secrets", name), /*prefix=*/false,
                     /*keys_only=*/false);
  if (!kvs.ok()) return kvs.status();
  if (kvs->empty()) return std::string();
  return kvs->front().value;
}

}  // namespace gdt::state
