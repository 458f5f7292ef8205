#include "ci/job_file.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/temp_dir.h"

namespace gdt::ci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kCi[] = R"(
stages: [build, train]
variables:
  GLOBAL: one
  SHARED: top
  NUMBER: 8
default:
  before_script:
    - source env.sh
train:
  stage: train
  parallel: 4
  timeout: 1h 30m
  variables:
    SHARED: job
    DESCRIBED: {value: "x", description: "y"}
  script:
    - python train.py
    - - nested one
  after_script: echo done
  artifacts:
    paths: [ckpt/]
    when: always
    expire_in: 1 day
  tags: [gpu]
lint:
  before_script: []
  script: make lint
.hidden:
  script: echo hidden
deploy:
  trigger: other/project
matrix:
  parallel:
    matrix:
      - GPU: [a100, h100]
  script: echo
big:
  parallel: 201
  script: echo
typo:
  scirpt: echo
steps:
  run:
    - name: hello
      script: echo hi
)";

TEST(CiYamlTest, ReadsAJobWithDefaults) {
  absl::StatusOr<CiJob> job = ParseCiJob(kCi, "train");

  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->stage, "train");
  EXPECT_EQ(job->parallel, 4);
  EXPECT_EQ(job->timeout_seconds, 5400);
  EXPECT_THAT(job->before_script, ElementsAre("source env.sh"));
  EXPECT_THAT(job->script, ElementsAre("python train.py", "nested one"));
  EXPECT_THAT(job->after_script, ElementsAre("echo done"));
  EXPECT_THAT(job->variables,
              ElementsAre(Pair("GLOBAL", "one"), Pair("SHARED", "job"),
                          Pair("NUMBER", "8"), Pair("DESCRIBED", "x")));
  EXPECT_THAT(job->artifacts.paths, ElementsAre("ckpt/"));
  EXPECT_EQ(job->artifacts.when, "always");
  EXPECT_EQ(job->artifacts.expire_in, "1 day");
}

// `id_tokens:` of the job, else of `default:`; aud one string or a list.
TEST(CiYamlTest, ReadsIdTokens) {
  constexpr char kYaml[] =
      "default:\n"
      "  id_tokens:\n"
      "    GDT_ID_TOKEN:\n"
      "      aud: https://gdt.example.com\n"
      "train:\n"
      "  script: [run]\n"
      "vault:\n"
      "  id_tokens:\n"
      "    VAULT_ID_TOKEN: {aud: [https://vault.example.com, other]}\n"
      "  script: [run]\n"
      "bad:\n"
      "  id_tokens: {TOKEN: {aud: []}}\n"
      "  script: [run]\n";
  absl::StatusOr<CiJob> train = ParseCiJob(kYaml, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->id_tokens.size(), 1u);
  EXPECT_EQ(train->id_tokens[0].first, "GDT_ID_TOKEN");
  EXPECT_EQ(train->id_tokens[0].second,
            std::vector<std::string>{"https://gdt.example.com"});
  absl::StatusOr<CiJob> vault = ParseCiJob(kYaml, "vault");
  ASSERT_TRUE(vault.ok()) << vault.status();
  ASSERT_EQ(vault->id_tokens.size(), 1u);
  EXPECT_EQ(vault->id_tokens[0].second,
            (std::vector<std::string>{"https://vault.example.com", "other"}));
  EXPECT_EQ(ParseCiJob(kYaml, "bad").status().message(),
            "job bad: id_tokens.TOKEN needs aud: a string or a list of "
            "strings");
}

// `image:`: the job's, else `default:`'s, else the top level's; a name or
// a map with one.
TEST(CiYamlTest, ReadsTheImageName) {
  constexpr char kYaml[] =
      "image: top:1\n"
      "default:\n"
      "  image: {name: \"python:$PY\", entrypoint: [\"\"]}\n"
      "train:\n"
      "  script: [run]\n"
      "own:\n"
      "  image: cuda:12\n"
      "  script: [run]\n"
      "plain:\n"
      "  inherit: {default: false}\n"
      "  script: [run]\n"
      "bad:\n"
      "  image: [a, b]\n"
      "  script: [run]\n";
  absl::StatusOr<CiJob> train = ParseCiJob(kYaml, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->image, "python:$PY");
  absl::StatusOr<CiJob> own = ParseCiJob(kYaml, "own");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(own->image, "cuda:12");
  absl::StatusOr<CiJob> plain = ParseCiJob(kYaml, "plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->image, "");
  EXPECT_EQ(ParseCiJob(kYaml, "bad").status().message(),
            "job bad: image must be a name or a map with a name");
}

// `services:` as GitLab reads them: names or maps, from the job, else
// `default:` (through `extends` and `!reference` too).
// `hooks:` (the job's, else default:'s): the two get_sources hooks GitLab
// knows; any other name is one line.
TEST(CiYamlTest, ReadsHooks) {
  constexpr char kYaml[] =
      "default:\n"
      "  hooks:\n"
      "    pre_get_sources_script: [echo default pre]\n"
      "train:\n"
      "  script: [run]\n"
      "own:\n"
      "  hooks:\n"
      "    pre_get_sources_script: echo own pre\n"
      "    post_get_sources_script: [echo a, [echo b]]\n"
      "  script: [run]\n"
      "bad:\n"
      "  hooks: {pre_build_script: [x]}\n"
      "  script: [run]\n";
  absl::StatusOr<CiJob> train = ParseCiJob(kYaml, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_THAT(train->pre_get_sources_script, ElementsAre("echo default pre"));
  EXPECT_TRUE(train->post_get_sources_script.empty());
  absl::StatusOr<CiJob> own = ParseCiJob(kYaml, "own");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_THAT(own->pre_get_sources_script, ElementsAre("echo own pre"));
  EXPECT_THAT(own->post_get_sources_script, ElementsAre("echo a", "echo b"));
  EXPECT_EQ(ParseCiJob(kYaml, "bad").status().message(),
            "job bad: hooks: unknown hook 'pre_build_script' (GitLab knows "
            "pre_get_sources_script and post_get_sources_script)");
}

TEST(CiYamlTest, ReadsServices) {
  constexpr char kYaml[] =
      ".db:\n"
      "  services:\n"
      "    - name: \"postgres:$PG\"\n"
      "      alias: db,pg\n"
      "      entrypoint: [docker-entrypoint.sh]\n"
      "      command: [postgres, -c, fsync=off]\n"
      "      variables: {POSTGRES_DB: test, PORT: 5432}\n"
      "default:\n"
      "  services: [redis:7]\n"
      "train:\n"
      "  script: [run]\n"
      "own:\n"
      "  extends: .db\n"
      "  script: [run]\n"
      "ref:\n"
      "  services: !reference [.db, services]\n"
      "  script: [run]\n"
      "plain:\n"
      "  inherit: {default: false}\n"
      "  script: [run]\n"
      "bad:\n"
      "  services: [{alias: x}]\n"
      "  script: [run]\n"
      "badcommand:\n"
      "  services: [{name: x, command: run}]\n"
      "  script: [run]\n";
  absl::StatusOr<CiJob> train = ParseCiJob(kYaml, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->services.size(), 1u);
  EXPECT_EQ(train->services[0].name, "redis:7");
  EXPECT_EQ(train->services[0].alias, "");
  EXPECT_TRUE(train->services[0].command.empty());
  absl::StatusOr<CiJob> own = ParseCiJob(kYaml, "own");
  ASSERT_TRUE(own.ok()) << own.status();
  ASSERT_EQ(own->services.size(), 1u);
  EXPECT_EQ(own->services[0].name, "postgres:$PG");
  EXPECT_EQ(own->services[0].alias, "db,pg");
  EXPECT_THAT(own->services[0].entrypoint, ElementsAre("docker-entrypoint.sh"));
  EXPECT_THAT(own->services[0].command,
              ElementsAre("postgres", "-c", "fsync=off"));
  EXPECT_THAT(
      own->services[0].variables,
      ElementsAre(std::pair<std::string, std::string>("POSTGRES_DB", "test"),
                  std::pair<std::string, std::string>("PORT", "5432")));
  absl::StatusOr<CiJob> ref = ParseCiJob(kYaml, "ref");
  ASSERT_TRUE(ref.ok()) << ref.status();
  ASSERT_EQ(ref->services.size(), 1u);
  EXPECT_EQ(ref->services[0].alias, "db,pg");
  absl::StatusOr<CiJob> plain = ParseCiJob(kYaml, "plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE(plain->services.empty());
  EXPECT_EQ(ParseCiJob(kYaml, "bad").status().message(),
            "job bad: services must be names or maps with a name");
  EXPECT_EQ(ParseCiJob(kYaml, "badcommand").status().message(),
            "job badcommand: services command must be a list of strings");
}

TEST(CiYamlTest, JobKeysOverrideDefaults) {
  absl::StatusOr<CiJob> job = ParseCiJob(kCi, "lint");

  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->before_script.empty());
  EXPECT_THAT(job->script, ElementsAre("make lint"));
  EXPECT_EQ(job->parallel, 1);
  EXPECT_EQ(job->stage, "test");
  EXPECT_FALSE(job->timeout_seconds.has_value());
}

// parallel:matrix makes one job per combination of each entry's values,
// named and ordered as GitLab does; bad matrices are one line.
TEST(CiYamlTest, ReadsAMatrixAsGitLabNamesItsJobs) {
  absl::StatusOr<CiJob> job = ParseCiJob(R"(
deploy:
  script: bin/deploy
  parallel:
    matrix:
      - PROVIDER: aws
        STACK: [monitoring, app1]
      - PROVIDER: [gcp, vultr]
        STACK: [data, processing]
        SIZE: 3
)",
                                         "deploy");
  ASSERT_TRUE(job.ok()) << job.status();
  std::vector<std::string> names;
  for (const CiMatrixJob& one : job->matrix) names.push_back(one.name);
  EXPECT_THAT(
      names, ElementsAre(
                 "deploy: [aws, monitoring]", "deploy: [aws, app1]",
                 "deploy: [gcp, data, 3]", "deploy: [gcp, processing, 3]",
                 "deploy: [vultr, data, 3]", "deploy: [vultr, processing, 3]"));
  EXPECT_EQ(job->matrix[3].variables,
            (std::vector<std::pair<std::string, std::string>>{
                {"PROVIDER", "gcp"}, {"STACK", "processing"}, {"SIZE", "3"}}));
  EXPECT_EQ(job->parallel, 1);

  const auto error = [](const char* parallel) {
    return std::string(
        ParseCiJob(absl::StrCat("j:\n  script: x\n  parallel:\n", parallel),
                   "j")
            .status()
            .message());
  };
  EXPECT_EQ(error("    matrix: {A: 1}\n"),
            "job j: parallel:matrix must be a list of variable maps");
  EXPECT_EQ(error("    matrix: [{A: [[1]]}]\n"),
            "job j: parallel:matrix: A: values must be strings");
  EXPECT_EQ(error("    matrix: [{A: []}]\n"),
            "job j: parallel:matrix: A has no value");
  EXPECT_EQ(error("    matrix: [{A: [1]}]\n    max: 2\n"),
            "job j: parallel must be an integer or a hash with 'matrix'");
  std::string many = "    matrix:\n      - A: [";
  for (int i = 0; i < 201; ++i) many += (i ? ", " : "") + std::to_string(i);
  many += "]\n";
  EXPECT_EQ(error(many.c_str()),
            "job j: parallel:matrix makes more than 200 jobs");
}

TEST(CiYamlTest, RejectsJobsThatCannotRun) {
  struct Case {
    const char* job;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"nope", absl::StatusCode::kNotFound, "no job 'nope' (jobs: train"},
      {".hidden", absl::StatusCode::kInvalidArgument, "job .hidden: is hidden"},
      {"deploy", absl::StatusCode::kInvalidArgument,
       "job deploy: is a trigger job"},
      {"big", absl::StatusCode::kInvalidArgument,
       "job big: parallel must be from 1 to 200, not 201"},
      {"typo", absl::StatusCode::kInvalidArgument,
       "job typo: unknown key 'scirpt'"},
      {"steps", absl::StatusCode::kInvalidArgument,
       "job steps: run: (CI/CD steps) is not supported by run-local; give the "
       "job a script:"},
      {"variables", absl::StatusCode::kInvalidArgument,
       "'variables' is a keyword"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<CiJob> job = ParseCiJob(kCi, c.job);

    EXPECT_EQ(job.status().code(), c.code) << c.job;
    EXPECT_THAT(std::string(job.status().message()), HasSubstr(c.message))
        << job.status();
  }
}

// A job that overrides one of an included GitLab template (gitaly's
// secret_detection: only its rules) gets its script from the template,
// which run-local does not read: the line says so.
TEST(CiYamlTest, AJobWithoutScriptNamesTheIncludesItCannotRead) {
  const absl::StatusOr<CiJob> overridden = ParseCiJob(
      "include:\n  - template: Security/Secret-Detection.gitlab-ci.yml\n"
      "secret_detection:\n  rules:\n    - when: always\n",
      "secret_detection");
  EXPECT_EQ(overridden.status().message(),
            "job secret_detection: has no script in the files run-local "
            "reads (it reads only local includes)");
  const absl::StatusOr<CiJob> plain =
      ParseCiJob("lonely:\n  image: x\n", "lonely");
  EXPECT_EQ(plain.status().message(), "job lonely: has no script");
}

// What real files inherit: merge keys, extends, default:, inherit: and
// !reference, as GitLab computes them.
TEST(CiYamlTest, ReadsTheConfigurationAJobInherits) {
  constexpr char kYaml[] = R"(
variables:
  GLOBAL: g
  OTHER: o
before_script: [echo top-level]
default:
  after_script: [echo default after]
.common: &common
  tags: [gpu]
  variables:
    FROM_ANCHOR: a
.setup:
  script: [echo setup one, echo setup two]
.template:
  timeout: 2h
  variables:
    FROM_TEMPLATE: t
    OVERRIDDEN: template
  artifacts: {paths: [out/], when: on_failure}
merged:
  <<: *common
  script: [echo merged]
extended:
  extends: .template
  variables:
    OVERRIDDEN: job
    RAW: {value: "$GLOBAL", expand: false}
  script:
    - !reference [.setup, script]
    - echo extended
alone:
  inherit: {default: false, variables: [OTHER]}
  script: [echo alone]
)";
  absl::StatusOr<CiJob> merged = ParseCiJob(kYaml, "merged");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_THAT(merged->variables,
              ElementsAre(Pair("GLOBAL", "g"), Pair("OTHER", "o"),
                          Pair("FROM_ANCHOR", "a")));
  EXPECT_THAT(merged->before_script, ElementsAre("echo top-level"));
  EXPECT_THAT(merged->after_script, ElementsAre("echo default after"));

  absl::StatusOr<CiJob> extended = ParseCiJob(kYaml, "extended");
  ASSERT_TRUE(extended.ok()) << extended.status();
  EXPECT_THAT(extended->script,
              ElementsAre("echo setup one", "echo setup two", "echo extended"));
  EXPECT_EQ(extended->timeout_seconds, 7200);
  EXPECT_THAT(extended->artifacts.paths, ElementsAre("out/"));
  EXPECT_EQ(extended->artifacts.when, "on_failure");
  EXPECT_THAT(extended->variables,
              ElementsAre(Pair("GLOBAL", "g"), Pair("OTHER", "o"),
                          Pair("FROM_TEMPLATE", "t"), Pair("OVERRIDDEN", "job"),
                          Pair("RAW", "$GLOBAL")));
  EXPECT_THAT(extended->raw_variables, ElementsAre("RAW"));

  absl::StatusOr<CiJob> alone = ParseCiJob(kYaml, "alone");
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_TRUE(alone->before_script.empty());
  EXPECT_TRUE(alone->after_script.empty());
  EXPECT_THAT(alone->variables, ElementsAre(Pair("OTHER", "o")));
}

TEST(CiYamlTest, InheritanceThatCannotBeResolvedIsOneLine) {
  constexpr char kYaml[] = R"(
.loop-a: {extends: .loop-b}
.loop-b: {extends: .loop-a}
looped:
  extends: .loop-a
  script: [echo]
orphan:
  extends: .from-an-include
  script: [echo]
dangling:
  script: [!reference [.nowhere, script]]
)";
  const std::pair<const char*, const char*> cases[] = {
      {"looped", "job looped: "},
      {"orphan",
       "job orphan: extends '.from-an-include', which is not in this file"},
      {"dangling", "job dangling: script: !reference"},
  };
  for (const auto& [job, message] : cases) {
    absl::StatusOr<CiJob> parsed = ParseCiJob(kYaml, job);
    ASSERT_FALSE(parsed.ok()) << job;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(message));
    EXPECT_EQ(std::string(parsed.status().message()).find('\n'),
              std::string::npos);
  }
}

// `when:`, `allow_failure:`, `retry:` and `needs:` as GitLab reads them:
// `retry:` from `default:`, a manual job allowed to fail unless it says
// otherwise.
TEST(CiYamlTest, ReadsWhenAllowFailureRetryAndNeeds) {
  constexpr char kFile[] = R"(
default:
  retry: 1
plain:
  script: [x]
flaky:
  allow_failure: {exit_codes: [3, 137]}
  retry: {max: 2, when: [runner_system_failure, script_failure]}
  needs: [plain, {job: build, artifacts: false}]
  script: [x]
play:
  when: manual
  retry: {exit_codes: 137}
  script: [x]
single:
  needs: {job: flaky, artifacts: false}
  rules:
    - if: $A
      needs: {job: plain}
    - when: on_success
  script: [x]
strict:
  when: manual
  allow_failure: false
  script: [x]
)";
  absl::StatusOr<CiJob> plain = ParseCiJob(kFile, "plain");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->when, "on_success");
  EXPECT_FALSE(plain->allow_failure);
  EXPECT_EQ(plain->retry.max, 1);
  EXPECT_FALSE(plain->retry.when.has_value());
  EXPECT_FALSE(plain->needs.has_value());

  absl::StatusOr<CiJob> flaky = ParseCiJob(kFile, "flaky");
  ASSERT_TRUE(flaky.ok()) << flaky.status();
  EXPECT_FALSE(flaky->allow_failure);
  EXPECT_THAT(flaky->allow_failure_exit_codes, ElementsAre(3, 137));
  EXPECT_EQ(flaky->retry.max, 2);
  EXPECT_THAT(*flaky->retry.when,
              ElementsAre("runner_system_failure", "script_failure"));
  EXPECT_THAT(*flaky->needs, ElementsAre("plain", "build"));
  EXPECT_THAT(*flaky->artifact_sources, ElementsAre("plain"));

  absl::StatusOr<CiJob> play = ParseCiJob(kFile, "play");
  ASSERT_TRUE(play.ok()) << play.status();
  EXPECT_EQ(play->when, "manual");
  EXPECT_TRUE(play->allow_failure);
  EXPECT_EQ(play->retry.max, 0);
  EXPECT_THAT(*play->retry.exit_codes, ElementsAre(137));
  // One need may be written as a mapping, as GitLab allows.
  absl::StatusOr<CiJob> single = ParseCiJob(kFile, "single");
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_THAT(*single->needs, ElementsAre("flaky"));
  EXPECT_THAT(*single->artifact_sources, ElementsAre());
  ASSERT_TRUE(single->rules.has_value());
  EXPECT_THAT(*(*single->rules)[0].needs, ElementsAre("plain"));
  absl::StatusOr<CiJob> strict = ParseCiJob(kFile, "strict");
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_FALSE(strict->allow_failure);

  for (const auto& [body, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"retry: 3", "retry must be 0, 1 or 2"},
           {"retry: {max: 1, when: [oops]}", "unknown failure reason 'oops'"},
           {"retry: {max: 1, on: x}", "unknown key retry:on"},
           {"when: later", "when must be on_success"},
           {"when: never", "GitLab never adds it to a pipeline"},
           {"allow_failure: {exit_codes: [x]}", "allow_failure:exit_codes"},
           {"allow_failure: yes please", "allow_failure must be"}}) {
    absl::StatusOr<CiJob> job =
        ParseCiJob(absl::StrCat("j:\n  script: [x]\n  ", body, "\n"), "j");
    ASSERT_FALSE(job.ok()) << body;
    EXPECT_THAT(job.status().message(), HasSubstr(message)) << body;
  }
}

// `artifacts:reports:dotenv` is kept (one file or a list); a job with only
// a report has no archive to upload; the other reports are ignored.
TEST(CiYamlTest, ReadsTheDotenvReport) {
  constexpr char kFile[] = R"(
one:
  script: [x]
  artifacts:
    reports: {dotenv: build.env, junit: report.xml}
many:
  script: [x]
  artifacts:
    paths: [out/]
    reports:
      dotenv: [a.env, out/b.env]
none:
  script: [x]
  artifacts: {reports: {junit: report.xml}}
)";
  absl::StatusOr<CiJob> one = ParseCiJob(kFile, "one");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_THAT(one->artifacts.dotenv, ElementsAre("build.env"));
  EXPECT_TRUE(one->artifacts.empty());
  absl::StatusOr<CiJob> many = ParseCiJob(kFile, "many");
  ASSERT_TRUE(many.ok()) << many.status();
  EXPECT_THAT(many->artifacts.dotenv, ElementsAre("a.env", "out/b.env"));
  EXPECT_FALSE(many->artifacts.empty());
  absl::StatusOr<CiJob> none = ParseCiJob(kFile, "none");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->artifacts.dotenv.empty());

  for (const auto& [body, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"artifacts: {reports: [x]}", "artifacts:reports must be a map"},
           {"artifacts: {reports: {dotenv: {a: b}}}",
            "artifacts:reports:dotenv"}}) {
    absl::StatusOr<CiJob> job =
        ParseCiJob(absl::StrCat("j:\n  script: [x]\n  ", body, "\n"), "j");
    ASSERT_FALSE(job.ok()) << body;
    EXPECT_THAT(job.status().message(), HasSubstr(message)) << body;
  }
}

TEST(CiYamlTest, ReadsCachesWithGitLabsDefaults) {
  constexpr char kFile[] = R"(
default:
  cache: {paths: [vendor/]}
inherits:
  script: [x]
several:
  script: [x]
  cache:
    - key: {files: [Gemfile.lock], prefix: gems}
      paths: [.gems/]
      policy: $POLICY
      when: always
      untracked: true
      unprotect: true
      fallback_keys: [main]
    - key: node
      paths: [node_modules/]
)";
  absl::StatusOr<CiJob> inherits = ParseCiJob(kFile, "inherits");
  ASSERT_TRUE(inherits.ok()) << inherits.status();
  ASSERT_EQ(inherits->caches.size(), 1u);
  EXPECT_EQ(inherits->caches[0].key, "default");
  EXPECT_THAT(inherits->caches[0].paths, ElementsAre("vendor/"));
  EXPECT_EQ(inherits->caches[0].policy, "pull-push");
  EXPECT_EQ(inherits->caches[0].when, "on_success");
  absl::StatusOr<CiJob> several = ParseCiJob(kFile, "several");
  ASSERT_TRUE(several.ok()) << several.status();
  ASSERT_EQ(several->caches.size(), 2u);
  const CiCache& gems = several->caches[0];
  ASSERT_TRUE(gems.key_files.has_value());
  EXPECT_THAT(*gems.key_files, ElementsAre("Gemfile.lock"));
  EXPECT_EQ(gems.key_prefix, "gems");
  EXPECT_EQ(gems.policy, "$POLICY");
  EXPECT_EQ(gems.when, "always");
  EXPECT_TRUE(gems.untracked);
  EXPECT_TRUE(gems.unprotect);
  EXPECT_THAT(gems.fallback_keys, ElementsAre("main"));
  EXPECT_EQ(several->caches[1].key, "node");

  for (const auto& [body, message] :
       std::vector<std::pair<std::string, std::string>>{
           {"cache: [a]", "cache must be a map"},
           {"cache: {when: never}", "cache:when must be"},
           {"cache: {pathz: [a]}", "unknown key cache:pathz"},
           {"cache: {key: {files: []}}", "cache:key:files"},
           {"cache: {key: {prefix: p}}", "cache:key:files"},
           {"cache: [{}, {}, {}, {}, {}]", "at most 4"}}) {
    absl::StatusOr<CiJob> job =
        ParseCiJob(absl::StrCat("j:\n  script: [x]\n  ", body, "\n"), "j");
    ASSERT_FALSE(job.ok()) << body;
    EXPECT_THAT(job.status().message(), HasSubstr(message)) << body;
  }
}

TEST(CiYamlTest, BadYamlIsOneLine) {
  absl::StatusOr<CiJob> job = ParseCiJob("train: [unclosed", "train");

  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("bad YAML"));
}

TEST(CiYamlTest, LoadNamesTheMissingFile) {
  test::TempDir dir;

  absl::StatusOr<CiJob> job = LoadCiJob(dir.path() + "/ci.yml", "train");

  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("/ci.yml"));
}

TEST(CiYamlTest, ParsesGitLabDurations) {
  const std::pair<const char*, int64_t> cases[] = {
      {"3600", 3600},  {"90 minutes", 5400}, {"1h 30m", 5400},
      {"1h30m", 5400}, {"2 hours", 7200},    {"1 hour and 5 mins", 3900},
      {"1d", 86400},   {"45s", 45},          {"3 days, 2h", 266400}};
  for (const auto& [text, seconds] : cases) {
    absl::StatusOr<int64_t> parsed = ParseDurationSeconds(text);

    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, seconds) << text;
  }
  for (const char* bad : {"", "soon", "1 fortnight", "-5", "0", "h"}) {
    EXPECT_FALSE(ParseDurationSeconds(bad).ok()) << bad;
  }
  // Terms whose sum would overflow 64 bits back to a small positive number
  // (2^64 + 60 seconds read as 60) are refused once past ten years.
  std::string huge;
  for (int i = 0; i < 400000; ++i) huge += "99999999w ";
  absl::StatusOr<int64_t> overflow = ParseDurationSeconds(huge);
  ASSERT_FALSE(overflow.ok()) << *overflow;
  EXPECT_THAT(std::string(overflow.status().message()),
              HasSubstr("is longer than ten years"));
  EXPECT_TRUE(ParseDurationSeconds("520 weeks").ok());
}

TEST(CiYamlTest, SlugifiesLikeGitLab) {
  EXPECT_EQ(Slugify("train 2/4"), "train-2-4");
  EXPECT_EQ(Slugify("Build: [A100, 8]"), "build---a100--8");
  EXPECT_EQ(Slugify(std::string(80, 'a')), std::string(63, 'a'));
}

}  // namespace
}  // namespace gdt::ci
