#include "testing/coordinator_fixture.h"

#include <utility>

namespace gdt::test {

InProcessCoordinatorTest::InProcessCoordinatorTest() {
  config_.listen_address = "127.0.0.1:0";
  config_.state_path = temp_.Sub("coord.db");
}

void InProcessCoordinatorTest::SetUp() {
  agent_address_ = agent_.Serve();
  ASSERT_FALSE(agent_address_.empty()) << "the fake agent cannot listen";
}

void InProcessCoordinatorTest::TearDown() {
  StopCoordinator();
  agent_.Stop();
}

void InProcessCoordinatorTest::StartCoordinator() {
  absl::StatusOr<std::unique_ptr<coordinator::CoordinatorServer>> server =
      coordinator::CoordinatorServer::Start(config_, clock_);
  ASSERT_TRUE(server.ok()) << "gdt-coord's server: " << server.status();
  server_ = std::move(*server);
  client_ =
      std::make_unique<rendezvous::CoordinatorClient>(server_->bound_address());
}

void InProcessCoordinatorTest::RestartCoordinator() {
  StopCoordinator();
  StartCoordinator();
}

void InProcessCoordinatorTest::StopCoordinator() {
  if (server_ == nullptr) return;
  server_->Shutdown();
  server_.reset();
}

void InProcessCoordinatorTest::SetAdminToken(const std::string& token) {
  config_.admin_token_file = temp_.Sub("admin.token");
  WriteTextFile(config_.admin_token_file, token + "\n");
}

std::unique_ptr<rendezvous::CoordinatorClient>
InProcessCoordinatorTest::ClientWith(const std::string& key,
                                     const std::string& value) const {
  auto client =
      std::make_unique<rendezvous::CoordinatorClient>(server_->bound_address());
  if (!key.empty()) client->AddMetadata(key, value);
  return client;
}

v1::HostSpec InProcessCoordinatorTest::LoopbackHost(const std::string& name,
                                                    uint32_t cpu_slots) const {
  v1::HostSpec host;
  host.set_name(name);
  host.set_address("127.0.0.1");
  host.set_agent_endpoint(agent_address_);
  host.set_cpu_slots(cpu_slots);
  return host;
}

std::map<std::string, std::string> InProcessCoordinatorTest::OpenJobGang() {
  server_->coordinator().kv().OpenGang(kGangId, 1, kKvToken);
  return {{"GDT_COORDINATOR", server_->bound_address()},
          {"GDT_GANG_ID", kGangId},
          {"GDT_EPOCH", "1"},
          {"GDT_KV_TOKEN", kKvToken}};
}

}  // namespace gdt::test
