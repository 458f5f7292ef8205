#include "common/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace gdt {
namespace {

// One transfer: where the body goes and what was seen.
struct Transfer {
  CURL* curl = nullptr;
  const HttpRequest* request = nullptr;
  HttpResponse response;
  FILE* out = nullptr;  // download_to, opened on the first 2xx body byte.
  int write_errno = 0;
  bool write_failed = false;
  bool too_large = false;
  Sha256 hash;
};

long ResponseCode(CURL* curl) {
  long code = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
  return code;
}

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t length = size * n;
  const long code = ResponseCode(t->curl);
  const bool ok = code >= 200 && code < 300;
  if (ok && !t->request->download_to.empty()) {
    if (t->out == nullptr) {
      t->out = std::fopen(t->request->download_to.c_str(), "wb");
      if (t->out == nullptr) {
        t->write_errno = errno;
        t->write_failed = true;
        return 0;
      }
    }
    if (std::fwrite(data, 1, length, t->out) != length) {
      t->write_errno = errno;
      t->write_failed = true;
      return 0;
    }
    t->hash.Update(std::string_view(data, length));
    t->response.downloaded_bytes += length;
    return length;
  }
  std::string& body = t->response.body;
  if (ok) {
    if (body.size() + length > t->request->max_body_bytes) {
      t->too_large = true;
      return 0;
    }
    body.append(data, length);
  } else if (body.size() < t->request->max_error_body_bytes) {
    body.append(
        data, std::min(length, t->request->max_error_body_bytes - body.size()));
  }
  return length;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * n);
  if (absl::StartsWithIgnoreCase(line, "HTTP/")) {
    // A new answer (after a redirect or a 100 Continue): only the last
    // one's headers and body count.
    t->response.headers.clear();
    if (t->request->download_to.empty() || t->out == nullptr) {
      t->response.body.clear();
    }
    return size * n;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    t->response.headers[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * n;
}

constexpr int kMaxRedirects = 5;

// Whether two absolute URLs share scheme, host and port (the port a
// scheme implies counts as given).
bool SameOrigin(const std::string& a, const std::string& b) {
  const auto origin = [](const std::string& url) {
    std::string result;
    CURLU* parsed = curl_url();
    if (parsed == nullptr ||
        curl_url_set(parsed, CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
      if (parsed != nullptr) curl_url_cleanup(parsed);
      return std::string();
    }
    for (CURLUPart part : {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT}) {
      char* value = nullptr;
      if (curl_url_get(parsed, part, &value, CURLU_DEFAULT_PORT) == CURLUE_OK) {
        absl::StrAppend(&result, absl::AsciiStrToLower(value), "|");
        curl_free(value);
      }
    }
    curl_url_cleanup(parsed);
    return result;
  };
  const std::string origin_a = origin(a);
  return !origin_a.empty() && origin_a == origin(b);
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// Closes a file on every path out.
struct FileCloser {
  FILE* file = nullptr;
  ~FileCloser() {
    if (file != nullptr) std::fclose(file);
  }
};

}  // namespace

std::string HttpResponse::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

HttpClient::HttpClient(HttpOptions options) : options_(std::move(options)) {
  GlobalInit();
}

HttpClient::~HttpClient() {
  MutexLock lock(mu_);
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

absl::StatusOr<HttpResponse> HttpClient::Send(const HttpRequest& request) {
  MutexLock lock(mu_);
  // A GET follows redirects here, one hop at a time, so that credentials
  // stay with their origin; libcurl would send custom headers anywhere.
  const bool follow_here = options_.follow_redirects && request.method == "GET";
  std::string url = request.url;
  // options_.timeout bounds the whole request, the redirects it follows
  // included: a server that redirects slowly must not hold the caller for
  // every hop's full timeout.
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  for (int hop = 0;; ++hop) {
    std::chrono::milliseconds timeout{0};
    if (options_.timeout.count() > 0) {
      timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (timeout.count() <= 0) {
        return absl::UnavailableError(absl::StrCat(
            "GET ", request.url, ": no answer within ",
            options_.timeout.count(), " ms (", hop, " redirects followed)"));
      }
    }
    absl::StatusOr<HttpResponse> response =
        SendOnce(request, url, hop == 0 || SameOrigin(url, request.url),
                 options_.follow_redirects && !follow_here, timeout);
    if (!follow_here || !response.ok() || response->redirect_url.empty()) {
      return response;
    }
    if (hop == kMaxRedirects) {
      return absl::UnavailableError(absl::StrCat(
          "GET ", request.url, ": more than ", kMaxRedirects, " redirects"));
    }
    url = std::move(response->redirect_url);
  }
}

absl::StatusOr<HttpResponse> HttpClient::SendOnce(
    const HttpRequest& request, const std::string& url, bool credentials,
    bool curl_follows, std::chrono::milliseconds timeout) {
  const std::string what = absl::StrCat(request.method, " ", url);
  if (curl_ == nullptr) curl_ = curl_easy_init();
  CURL* curl = static_cast<CURL*>(curl_);
  if (curl == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(what, ": cannot start libcurl (curl_easy_init failed)"));
  }
  // Options from the last request go; the open connection stays.
  curl_easy_reset(curl);
  Transfer t;
  t.curl = curl;
  t.request = &request;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.connect_timeout.count()));
  if (timeout.count() > 0) {
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS,
                     static_cast<long>(timeout.count()));
  }
  if (!options_.ca_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.ca_file.c_str());
  }
  if (curl_follows) {
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, static_cast<long>(kMaxRedirects));
    curl_easy_setopt(curl, CURLOPT_UNRESTRICTED_AUTH, 0L);
  }
  struct curl_slist* headers = nullptr;
  for (const std::string& header : request.headers) {
    headers = curl_slist_append(headers, header.c_str());
  }
  if (credentials) {
    for (const std::string& header : request.credential_headers) {
      headers = curl_slist_append(headers, header.c_str());
    }
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);

  FileCloser upload;
  curl_mime* mime = nullptr;
  if (!request.upload_file.empty()) {
    upload.file = std::fopen(request.upload_file.c_str(), "rb");
    if (upload.file == nullptr) {
      curl_slist_free_all(headers);
      return absl::NotFoundError(absl::StrCat(
          "cannot read ", request.upload_file, ": ", std::strerror(errno)));
    }
    std::fseek(upload.file, 0, SEEK_END);
    const long size = std::ftell(upload.file);
    std::rewind(upload.file);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READDATA, upload.file);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(size));
  } else if (!request.form_file.empty()) {
    mime = curl_mime_init(curl);
    curl_mimepart* part = curl_mime_addpart(mime);
    curl_mime_name(part, request.form_field.c_str());
    if (curl_mime_filedata(part, request.form_file.c_str()) != CURLE_OK) {
      curl_mime_free(mime);
      curl_slist_free_all(headers);
      return absl::NotFoundError(
          absl::StrCat("cannot read ", request.form_file));
    }
    curl_easy_setopt(curl, CURLOPT_MIMEPOST, mime);
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.body.size()));
  }
  char error[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (mime != nullptr) curl_mime_free(mime);
  // The kept handle must not point at this call's buffers.
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  t.response.status = ResponseCode(curl);
  if (t.response.status >= 300 && t.response.status < 400) {
    char* location = nullptr;
    curl_easy_getinfo(curl, CURLINFO_REDIRECT_URL, &location);
    if (location != nullptr) t.response.redirect_url = location;
  }

  bool close_failed = false;
  if (t.out != nullptr) {
    close_failed = std::fclose(t.out) != 0;
    if (close_failed) t.write_errno = errno;
  }
  t.out = nullptr;
  const auto fail = [&](absl::Status status) {
    if (!request.download_to.empty()) std::remove(request.download_to.c_str());
    return status;
  };
  if (t.write_failed || close_failed) {
    return fail(absl::UnavailableError(
        absl::StrCat(what, ": cannot write ", request.download_to, ": ",
                     std::strerror(t.write_errno))));
  }
  if (t.too_large) {
    return fail(absl::UnavailableError(
        absl::StrCat(what, ": the answer is larger than ",
                     request.max_body_bytes, " bytes")));
  }
  if (rc != CURLE_OK) {
    return fail(absl::UnavailableError(absl::StrCat(
        what, ": ", error[0] != '\0' ? error : curl_easy_strerror(rc))));
  }
  if (!request.download_to.empty()) {
    if (!t.response.ok()) {
      std::remove(request.download_to.c_str());
    } else {
      if (t.response.downloaded_bytes == 0) {
        // An empty 2xx body: still leave the (empty) file.
        FILE* f = std::fopen(request.download_to.c_str(), "wb");
        if (f == nullptr || std::fclose(f) != 0) {
          return fail(absl::UnavailableError(
              absl::StrCat(what, ": cannot write ", request.download_to, ": ",
                           std::strerror(errno))));
        }
      }
      t.response.downloaded_sha256 = t.hash.FinishHex();
    }
  }
  return std::move(t.response);
}

}  // namespace gdt
