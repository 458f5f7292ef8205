#include "state/etcd_client.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gdt::state {
namespace {

std::string Base64(const std::string& bytes) {
  return absl::Base64Escape(bytes);
}

// A range over the whole state can be large; anything beyond this is not
// an answer of ours.
constexpr size_t kMaxAnswerBytes = size_t{256} << 20;

// The gateway sends 64-bit numbers as decimal strings and leaves out zeros.
int64_t Int64Field(const nlohmann::json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  int64_t value = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &value)) {
    return value;
  }
  return 0;
}

absl::StatusOr<std::string> Base64Field(const nlohmann::json& object,
                                        const char* name) {
  auto it = object.find(name);
  if (it == object.end()) return std::string();
  std::string decoded;
  if (!it->is_string() ||
      !absl::Base64Unescape(it->get<std::string>(), &decoded)) {
    return absl::InternalError(
        absl::StrCat("etcd sent a ", name, " that is not base64"));
  }
  return decoded;
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    const std::vector<std::string>& endpoints,
    std::chrono::milliseconds timeout) {
  if (endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoints given");
  }
  std::vector<std::string> urls;
  for (const std::string& endpoint : endpoints) {
    if (endpoint.empty()) {
      return absl::InvalidArgumentError("an etcd endpoint is empty");
    }
    urls.push_back(absl::StrContains(endpoint, "://")
                       ? endpoint
                       : absl::StrCat("http://", endpoint));
  }
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(urls), timeout));
}

EtcdClient::EtcdClient(std::vector<std::string> endpoints,
                       std::chrono::milliseconds timeout)
    : endpoints_(std::move(endpoints)),
      http_(HttpOptions{.timeout = timeout, .connect_timeout = timeout}) {}

EtcdClient::~EtcdClient() = default;

absl::StatusOr<nlohmann::json> EtcdClient::Post(const std::string& path,
                                                const nlohmann::json& body) {
  const std::string payload = body.dump();
  MutexLock lock(mu_);
  std::string last_error;
  for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
    const size_t index = (current_ + attempt) % endpoints_.size();
    const std::string url = endpoints_[index] + path;
    HttpRequest request{.method = "POST", .url = url, .body = payload};
    request.max_body_bytes = kMaxAnswerBytes;
    // etcd's errors are JSON whose message is wanted whole.
    request.max_error_body_bytes = kMaxAnswerBytes;
    absl::StatusOr<HttpResponse> response = http_.Send(request);
    if (!response.ok()) {
      last_error = std::string(response.status().message());
      continue;
    }
    const long http_code = response->status;
    const std::string& answer = response->body;
    nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return absl::InternalError(
          absl::StrCat("etcd at ", url, " answered HTTP ", http_code,
                       " with what is not JSON: ", answer.substr(0, 200)));
    }
    // Streaming calls (lease keepalive) wrap their one answer in "result".
    if (parsed.contains("result") && parsed["result"].is_object()) {
      parsed = parsed["result"];
    }
    if (http_code != 200 || parsed.contains("error")) {
      const std::string message = parsed.value(
          "message", parsed.value("error", std::string("unknown error")));
      // gRPC code 14 = UNAVAILABLE (no leader, member stopping): try the next.
      if (parsed.value("code", 0) == 14) {
        last_error = absl::StrCat(url, ": ", message);
        continue;
      }
      return absl::InvalidArgumentError(
          absl::StrCat("etcd refused ", path, ": ", message));
    }
    current_ = index;
    return parsed;
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd endpoint answered (last: ", last_error, ")"));
}

absl::StatusOr<EtcdKeyValue> EtcdClient::ParseKeyValue(
    const nlohmann::json& kv) {
  EtcdKeyValue result;
  absl::StatusOr<std::string> key = Base64Field(kv, "key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> value = Base64Field(kv, "value");
  if (!value.ok()) return value.status();
  result.key = std::move(*key);
  result.value = std::move(*value);
  result.create_revision = Int64Field(kv, "create_revision");
  result.mod_revision = Int64Field(kv, "mod_revision");
  result.lease = Int64Field(kv, "lease");
  return result;
}

absl::StatusOr<std::vector<EtcdKeyValue>> EtcdClient::Range(
    const std::string& key, bool prefix, bool keys_only) {
  nlohmann::json request = {{"key", Base64(key)}};
  if (prefix) request["range_end"] = Base64(PrefixEnd(key));
  if (keys_only) request["keys_only"] = true;
  absl::StatusOr<nlohmann::json> answer = Post("/v3/kv/range", request);
  if (!answer.ok()) return answer.status();
  std::vector<EtcdKeyValue> kvs;
  auto it = answer->find("kvs");
  if (it == answer->end()) return kvs;
  if (!it->is_array()) return absl::InternalError("etcd sent kvs not a list");
  for (const nlohmann::json& kv : *it) {
    absl::StatusOr<EtcdKeyValue> parsed = ParseKeyValue(kv);
    if (!parsed.ok()) return parsed.status();
    kvs.push_back(std::move(*parsed));
  }
  return kvs;
}

absl::StatusOr<EtcdRangePages> EtcdClient::RangePages(const std::string& prefix,
                                                      int64_t page_size,
                                                      int64_t revision) {
  EtcdRangePages pages;
  pages.revision = revision;
  const std::string end = PrefixEnd(prefix);
  std::string from = prefix;
  while (true) {
    nlohmann::json request = {{"key", Base64(from)},
                              {"range_end", Base64(end)},
                              {"limit", std::to_string(page_size)}};
    if (pages.revision != 0) {
      request["revision"] = std::to_string(pages.revision);
    }
    absl::StatusOr<nlohmann::json> answer = Post("/v3/kv/range", request);
    if (!answer.ok()) return answer.status();
    if (pages.revision == 0 && answer->contains("header")) {
      pages.revision = Int64Field((*answer)["header"], "revision");
    }
    auto it = answer->find("kvs");
    if (it == answer->end()) return pages;
    if (!it->is_array()) return absl::InternalError("etcd sent kvs not a list");
    for (const nlohmann::json& kv : *it) {
      absl::StatusOr<EtcdKeyValue> parsed = ParseKeyValue(kv);
      if (!parsed.ok()) return parsed.status();
      pages.kvs.push_back(std::move(*parsed));
    }
    if (!answer->value("more", false) || it->empty()) return pages;
    // The next page starts just past the last key of this one.
    from = pages.kvs.back().key + std::string(1, '\0');
  }
}

absl::StatusOr<EtcdTxnResult> EtcdClient::Txn(const nlohmann::json& compare,
                                              const nlohmann::json& success,
                                              const nlohmann::json& failure) {
  nlohmann::json request = nlohmann::json::object();
  if (!compare.empty()) request["compare"] = compare;
  if (!success.empty()) request["success"] = success;
  if (!failure.empty()) request["failure"] = failure;
  absl::StatusOr<nlohmann::json> answer = Post("/v3/kv/txn", request);
  if (!answer.ok()) return answer.status();
  EtcdTxnResult result;
  result.succeeded = answer->value("succeeded", false);
  if (answer->contains("header")) {
    result.revision = Int64Field((*answer)["header"], "revision");
  }
  if (answer->contains("responses")) result.responses = (*answer)["responses"];
  return result;
}

absl::StatusOr<int64_t> EtcdClient::GrantLease(int64_t ttl_s) {
  absl::StatusOr<nlohmann::json> answer =
      Post("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}});
  if (!answer.ok()) return answer.status();
  const int64_t id = Int64Field(*answer, "ID");
  if (id == 0) return absl::InternalError("etcd granted a lease without id");
  return id;
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  absl::StatusOr<nlohmann::json> answer =
      Post("/v3/lease/keepalive", {{"ID", std::to_string(lease)}});
  if (!answer.ok()) return answer.status();
  const int64_t ttl = Int64Field(*answer, "TTL");
  if (ttl <= 0) {
    return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " expired"));
  }
  return ttl;
}

absl::Status EtcdClient::RevokeLease(int64_t lease) {
  return Post("/v3/lease/revoke", {{"ID", std::to_string(lease)}}).status();
}

nlohmann::json EtcdClient::Put(const std::string& key, const std::string& value,
                               int64_t lease) {
  nlohmann::json put = {{"key", Base64(key)}, {"value", Base64(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

nlohmann::json EtcdClient::Delete(const std::string& key) {
  return {{"request_delete_range", {{"key", Base64(key)}}}};
}

nlohmann::json EtcdClient::DeletePrefix(const std::string& prefix) {
  return {
      {"request_delete_range",
       {{"key", Base64(prefix)}, {"range_end", Base64(PrefixEnd(prefix))}}}};
}

nlohmann::json EtcdClient::Get(const std::string& key) {
  return {{"request_range", {{"key", Base64(key)}}}};
}

nlohmann::json EtcdClient::CreateRevisionIs(const std::string& key,
                                            int64_t revision) {
  return {{"key", Base64(key)},
          {"result", "EQUAL"},
          {"target", "CREATE"},
          {"create_revision", std::to_string(revision)}};
}

std::string EtcdClient::PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // Every key.
}

}  // namespace gdt::state
