#include "common/exit_code.h"

#include "gtest/gtest.h"

namespace gdt {
namespace {

TEST(ExitCodeTest, MapsTheStatusCode) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("bad flag")), kExitUsage);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("down")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("no gang")), kExitFailure);
  EXPECT_EQ(ExitCodeFor(absl::PermissionDeniedError("wrong token")),
            kExitFailure);
}

TEST(ExitCodeTest, AnAttachedExitCodeWinsAndKeepsTheMessage) {
  const absl::Status refused =
      WithExitCode(absl::NotFoundError("no host 'h'"), kExitRefused);
  EXPECT_EQ(ExitCodeFor(refused), kExitRefused);
  EXPECT_EQ(refused.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(refused.message(), "no host 'h'");
  EXPECT_EQ(
      ExitCodeFor(WithExitCode(absl::InvalidArgumentError("x"), kExitFailure)),
      kExitFailure);
  EXPECT_TRUE(WithExitCode(absl::OkStatus(), kExitRefused).ok());
}

}  // namespace
}  // namespace gdt
