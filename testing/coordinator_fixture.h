#ifndef GDT_TESTING_COORDINATOR_FIXTURE_H_
#define GDT_TESTING_COORDINATOR_FIXTURE_H_

// The fixture of every test that runs gdt-coord's server in its own
// process: a real CoordinatorServer (scheduler, Coordinator, GangKv and
// checkpoint services, SQLite state in a temp dir) on 127.0.0.1:0, a fake
// agent on loopback that answers the port checks of the hosts the test
// registers, and a client. Tests set config_ before StartCoordinator().

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/clock.h"
#include "coordinator/config.h"
#include "coordinator/server.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator_client.h"
#include "testing/fake_agent.h"
#include "testing/temp_dir.h"

namespace gdt::test {

class InProcessCoordinatorTest : public ::testing::Test {
 protected:
  static constexpr char kGangId[] = "g-1";
  static constexpr char kKvToken[] = "secret";

  InProcessCoordinatorTest();
  // Starts the fake agent. A test's own SetUp calls this first.
  void SetUp() override;
  // Stops the server and the agent.
  void TearDown() override;

  // Starts the server with config_ (listening on 127.0.0.1:0, state in
  // temp_ unless the test changed them) and makes client_ for it; a
  // failure to start fails the test (ASSERT_NO_FATAL_FAILURE around it).
  void StartCoordinator();
  // Stops the server and starts it again with config_ on the same state.
  void RestartCoordinator();
  // Stops the server (ends its streams). Idempotent.
  void StopCoordinator();

  // Writes `token` to a file in temp_ and names that file as
  // config_.admin_token_file (operator calls must present the token).
  void SetAdminToken(const std::string& token);
  // A client of the server that sends `key: value` as metadata with every
  // call (nothing when `key` is empty).
  std::unique_ptr<rendezvous::CoordinatorClient> ClientWith(
      const std::string& key, const std::string& value) const;

  // host:port the server listens on.
  const std::string& endpoint() const { return server_->bound_address(); }
  // A host on 127.0.0.1 with `cpu_slots` CPU slots whose agent is agent_.
  v1::HostSpec LoopbackHost(const std::string& name, uint32_t cpu_slots) const;
  // Opens the key-value store of gang kGangId (epoch 1, token kKvToken) as
  // the coordinator does when it admits a gang, without admitting one;
  // returns what its jobs find in their environment: GDT_COORDINATOR,
  // GDT_GANG_ID, GDT_EPOCH, GDT_KV_TOKEN.
  std::map<std::string, std::string> OpenJobGang();

  TempDir temp_;
  SystemClock clock_;
  FakeAgent agent_;
  std::string agent_address_;
  coordinator::Config config_;
  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::unique_ptr<rendezvous::CoordinatorClient> client_;
};

}  // namespace gdt::test

#endif  // GDT_TESTING_COORDINATOR_FIXTURE_H_
