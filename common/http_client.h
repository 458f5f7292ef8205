#ifndef GDT_COMMON_HTTP_CLIENT_H_
#define GDT_COMMON_HTTP_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"

namespace gdt {

// How one client reaches its server.
struct HttpOptions {
  // PEM CA bundle for https:// servers; empty: the system's CAs.
  std::string ca_file;
  // Limit on a whole request (connect, send, answer, and every redirect
  // Send follows itself); 0: none.
  std::chrono::milliseconds timeout{0};
  // Limit on connecting alone.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(30)};
  // Follow up to 5 redirects. A GET's `credential_headers` go only to the
  // scheme, host and port of its URL: a redirect target elsewhere (a
  // presigned object store URL) gets the request without them.
  bool follow_redirects = false;
};

struct HttpRequest {
  std::string method = "GET";  // GET, POST or PUT.
  std::string url;
  std::vector<std::string> headers;  // "Name: value" lines.
  // Like `headers`, but never sent to another origin on a redirect (GET
  // only; other methods are not redirected with them either way).
  std::vector<std::string> credential_headers;
  // What is sent (at most one): `body` as is (POST), the file
  // `upload_file` (PUT), or the file `form_file` as the form field
  // `form_field` of a multipart/form-data POST.
  std::string body;
  std::string upload_file;
  std::string form_file;
  std::string form_field = "file";
  // Non-empty: a 2xx answer's body is written to this file (created on its
  // first byte, empty when the body is; removed again when the transfer
  // fails) and only its size and SHA-256 are kept.
  std::string download_to;
  // Largest body of a 2xx answer kept in memory; a larger one fails the
  // request (nothing a server of ours sends is that big).
  size_t max_body_bytes = size_t{4} << 20;
  // Other answers' bodies serve error messages only: cut to this length.
  size_t max_error_body_bytes = size_t{64} << 10;
};

struct HttpResponse {
  long status = 0;   // HTTP status code of the last answer.
  std::string body;  // Unless written to download_to.
  // Header fields of the last answer (after redirects), names in lower
  // case; a field sent twice keeps its last value.
  std::map<std::string, std::string> headers;
  // A redirect's target that was not followed (follow_redirects off).
  std::string redirect_url;
  uint64_t downloaded_bytes = 0;  // With download_to.
  std::string downloaded_sha256;  // Hex, with download_to.

  bool ok() const { return status >= 200 && status < 300; }
  // A header's value, empty when absent; `name` in lower case.
  std::string Header(const std::string& name) const;
};

// The one libcurl wrapper: every HTTP call gdt makes (GitLab's REST API and
// ID token keys, etcd's JSON gateway) goes through it, so timeouts, CA
// files, redirects and body limits are handled once. Errors are values;
// an answer with any HTTP status is a response, not an error — callers
// know what their server's codes mean.
//
// Thread-safe: one request at a time per client; the connection is kept
// for the next request to the same server.
class HttpClient {
 public:
  explicit HttpClient(HttpOptions options = {});
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Errors: Unavailable "<METHOD> <url>: <reason>" when the server cannot be
  // reached or the transfer breaks off (connect failure, TLS, timeout), a
  // 2xx body exceeds max_body_bytes, or download_to cannot be written;
  // NotFound when upload_file or form_file cannot be read.
  absl::StatusOr<HttpResponse> Send(const HttpRequest& request);

  const HttpOptions& options() const { return options_; }

 private:
  // One transfer to `url`, with request.credential_headers when
  // `credentials`, following no redirect itself unless `curl_follows`,
  // within `timeout` (0: none).
  absl::StatusOr<HttpResponse> SendOnce(const HttpRequest& request,
                                        const std::string& url,
                                        bool credentials, bool curl_follows,
                                        std::chrono::milliseconds timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const HttpOptions options_;
  Mutex mu_;
  void* curl_ ABSL_GUARDED_BY(mu_) = nullptr;  // CURL*, kept for keep-alive.
};

}  // namespace gdt

#endif  // GDT_COMMON_HTTP_CLIENT_H_
