// core/train data: llm.c token shards, the synthetic Markov corpus and its entropy rate, byte-level
// text, and the DataLoader's rank slices and resumable position.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/base/error.hpp"
#include "core/train/corpus.hpp"
#include "core/train/data_loader.hpp"
#include "core/train/markov.hpp"
#include "core/train/token_file.hpp"

using namespace shardlab;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  fs::path dir = fs::path(::testing::TempDir()) / "shardlab_data_test";
  fs::create_directories(dir);
  return (dir / name).string();
}

// Writes raw header ints followed by `body` bytes.
void write_raw(const std::string& path, std::vector<int32_t> header, const std::string& body) {
  header.resize(256, 0);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(body.data(), static_cast<std::streamsize>(body.size()));
}

// Runs f, expects an IoError and returns its message.
template <typename F>
std::string io_error_of(F f) {
  try {
    f();
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IoError thrown";
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

// ---- llm.c token shards -------------------------------------------------------------------------

TEST(TokenFile, RoundTripKeepsEveryToken) {
  std::string path = temp_path("roundtrip.bin");
  std::vector<uint16_t> tokens = {0, 1, 255, 256, 50256, 65535, 7, 7, 7};
  write_token_file(path, tokens);
  EXPECT_EQ(fs::file_size(path), 1024u + 2u * tokens.size());
  EXPECT_EQ(read_token_file(path), tokens);
  // The header is llm.c's: magic, version, count.
  std::ifstream in(path, std::ios::binary);
  int32_t h[3];
  in.read(reinterpret_cast<char*>(h), sizeof h);
  EXPECT_EQ(h[0], 20240520);
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], static_cast<int32_t>(tokens.size()));
  // The atomic write leaves no temporary file behind.
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_FALSE(contains(e.path().filename().string(), "roundtrip.bin.tmp")) << e.path();
}

TEST(TokenFile, EmptyShardRoundTrips) {
  std::string path = temp_path("empty.bin");
  write_token_file(path, {});
  EXPECT_TRUE(read_token_file(path).empty());
}

TEST(TokenFile, WrongMagicNamesFileAndValue) {
  std::string path = temp_path("magic.bin");
  write_raw(path, {1234, 1, 2}, std::string(4, '\0'));
  std::string m = io_error_of([&] { read_token_file(path); });
  EXPECT_TRUE(contains(m, path)) << m;
  EXPECT_TRUE(contains(m, "bad magic 1234")) << m;
  EXPECT_TRUE(contains(m, "20240520")) << m;
}

TEST(TokenFile, WrongVersionNamesFile) {
  std::string path = temp_path("version.bin");
  write_raw(path, {20240520, 2, 2}, std::string(4, '\0'));
  std::string m = io_error_of([&] { read_token_file(path); });
  EXPECT_TRUE(contains(m, path)) << m;
  EXPECT_TRUE(contains(m, "unsupported version 2")) << m;
}

TEST(TokenFile, TruncatedBodyNamesExpectedAndActualSize) {
  std::string path = temp_path("truncated.bin");
  write_token_file(path, std::vector<uint16_t>(100, 3));
  fs::resize_file(path, 1024 + 150);  // 75 of the 100 tokens
  std::string m = io_error_of([&] { read_token_file(path); });
  EXPECT_TRUE(contains(m, path)) << m;
  EXPECT_TRUE(contains(m, "truncated")) << m;
  EXPECT_TRUE(contains(m, "expected 1224 bytes, file has 1174")) << m;
}

TEST(TokenFile, ShorterThanHeaderAndMissingFile) {
  std::string path = temp_path("short.bin");
  std::ofstream(path) << "tiny";
  std::string m = io_error_of([&] { read_token_file(path); });
  EXPECT_TRUE(contains(m, path) && contains(m, "4 bytes")) << m;
  std::string missing = temp_path("does_not_exist.bin");
  m = io_error_of([&] { read_token_file(missing); });
  EXPECT_TRUE(contains(m, missing) && contains(m, "No such file")) << m;
  m = io_error_of([&] { read_file_bytes(fs::path(path).parent_path().string()); });
  EXPECT_TRUE(contains(m, "is a directory")) << m;
}

// ---- the synthetic Markov chain -----------------------------------------------------------------

TEST(Markov, UniformChainHasEntropyLogV) {
  const int V = 7;
  std::vector<std::vector<MarkovChain::Transition>> rows(V);
  for (int i = 0; i < V; ++i)
    for (int j = 0; j < V; ++j) rows[i].push_back({j, 1.0 / V});
  MarkovChain chain(rows);
  EXPECT_NEAR(chain.entropy_rate(), std::log(7.0), 1e-12);
  for (double p : chain.stationary()) EXPECT_NEAR(p, 1.0 / V, 1e-12);
}

TEST(Markov, TwoStateChainMatchesClosedForm) {
  // P = [[1-a, a], [b, 1-b]]: pi = (b, a) / (a + b), H = pi0 h(a) + pi1 h(b), h the binary entropy.
  const double a = 0.1, b = 0.3;
  MarkovChain chain({{{0, 1 - a}, {1, a}}, {{0, b}, {1, 1 - b}}});
  auto h = [](double p) { return -p * std::log(p) - (1 - p) * std::log(1 - p); };
  const double pi0 = b / (a + b), pi1 = a / (a + b);
  EXPECT_NEAR(chain.stationary()[0], pi0, 1e-12);
  EXPECT_NEAR(chain.stationary()[1], pi1, 1e-12);
  EXPECT_NEAR(chain.entropy_rate(), pi0 * h(a) + pi1 * h(b), 1e-12);
  EXPECT_NEAR(chain.entropy_rate(), 0.39653, 1e-5);  // 0.75*0.32508 + 0.25*0.61086
}

TEST(Markov, PeriodicChainStillConverges) {
  // A deterministic 3-cycle is periodic: plain power iteration from a non-uniform start would
  // oscillate; the lazy chain converges. H = 0: the next token is certain.
  MarkovChain chain({{{1, 1.0}}, {{2, 1.0}}, {{0, 1.0}}});
  for (double p : chain.stationary()) EXPECT_NEAR(p, 1.0 / 3, 1e-12);
  EXPECT_NEAR(chain.entropy_rate(), 0.0, 1e-15);
}

TEST(Markov, RandomChainStationaryIsAFixedPoint) {
  SyntheticSpec spec;
  spec.vocab = 64;
  spec.successors = 3;
  MarkovChain chain = MarkovChain::random(spec);
  const auto& pi = chain.stationary();
  std::vector<double> next(64, 0.0);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(chain.row(i).size(), 3u);
    EXPECT_DOUBLE_EQ(chain.prob(i, (i + 1) % 64) > 0.0, true);  // the irreducibility cycle
    for (const auto& t : chain.row(i)) next[t.next] += pi[i] * t.prob;
  }
  for (int j = 0; j < 64; ++j) EXPECT_NEAR(next[j], pi[j], 1e-12);
  EXPECT_GT(chain.entropy_rate(), 0.0);
  EXPECT_LT(chain.entropy_rate(), std::log(3.0));
}

TEST(Markov, EmpiricalNllOfALongSampleMatchesEntropyRate) {
  SyntheticSpec spec;  // the default chain the trainer uses
  MarkovChain chain = MarkovChain::random(spec);
  std::vector<uint16_t> sample = chain.sample(1 << 20, 99);
  // Per-token NLL has a standard deviation well under 1 nat; over 1M tokens the mean is within
  // a few 1e-3 of its expectation, the entropy rate.
  EXPECT_NEAR(chain.mean_nll(sample), chain.entropy_rate(), 0.01);
  // A wrong answer would not pass: log(successors) is the uniform-row entropy, clearly larger.
  EXPECT_GT(std::log(spec.successors) - chain.entropy_rate(), 0.1);
}

TEST(Markov, SameSeedSameCorpus) {
  SyntheticSpec spec;
  spec.tokens = 5000;
  TokenCorpus a = make_synthetic_corpus(spec), b = make_synthetic_corpus(spec);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_DOUBLE_EQ(a.entropy_rate, b.entropy_rate);
  spec.seed += 1;
  TokenCorpus c = make_synthetic_corpus(spec);
  EXPECT_NE(a.tokens, c.tokens);
  EXPECT_NE(a.entropy_rate, c.entropy_rate);
}

// ---- byte-level text and dispatch ---------------------------------------------------------------

TEST(Corpus, TextFileIsOneTokenPerByte) {
  std::string path = temp_path("text.txt");
  std::string text = "shard \xc3\xa9\n";  // UTF-8 e-acute is two bytes, two tokens
  std::ofstream(path, std::ios::binary) << text;
  TokenCorpus c = load_corpus(path, SyntheticSpec{});
  EXPECT_EQ(c.kind, CorpusKind::text);
  ASSERT_EQ(c.tokens.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i) EXPECT_EQ(c.tokens[i], static_cast<uint8_t>(text[i]));
  EXPECT_EQ(c.vocab, 256);
  EXPECT_TRUE(std::isnan(c.entropy_rate));
}

TEST(Corpus, BinPathLoadsAsTokenShard) {
  std::string path = temp_path("dispatch.bin");
  write_token_file(path, {5, 900, 2});
  TokenCorpus c = load_corpus(path, SyntheticSpec{});
  EXPECT_EQ(c.kind, CorpusKind::tokens);
  EXPECT_EQ(c.tokens, (std::vector<uint16_t>{5, 900, 2}));
  EXPECT_EQ(c.vocab, 901);
}

// ---- DataLoader ---------------------------------------------------------------------------------

namespace {
std::shared_ptr<const TokenCorpus> counting_corpus(int n) {
  auto c = std::make_shared<TokenCorpus>();
  c->name = "counting";
  for (int i = 0; i < n; ++i) c->tokens.push_back(static_cast<uint16_t>(i));
  c->vocab = n;
  return c;
}
}  // namespace

TEST(DataLoader, RowsAreCorpusWindowsWithShiftedTargets) {
  // Token i == i, so a row's content tells where it came from.
  auto corpus = counting_corpus(1001);
  DataLoader loader(corpus, {4, 10, 0, 1, 7});
  EXPECT_EQ(loader.windows_per_epoch(), 100);
  for (int b = 0; b < 3; ++b) {
    Batch batch = loader.next();
    ASSERT_EQ(batch.rows, 4);
    for (int j = 0; j < 4; ++j) {
      int start = batch.inputs[j * 10];
      EXPECT_EQ(start % 10, 0);
      for (int t = 0; t < 10; ++t) {
        EXPECT_EQ(batch.inputs[j * 10 + t], start + t);
        EXPECT_EQ(batch.targets[j * 10 + t], start + t + 1);
      }
    }
  }
}

TEST(DataLoader, EachEpochVisitsEveryWindowOnceInANewOrder) {
  auto corpus = counting_corpus(241);  // 24 windows of 10 (+1)
  DataLoader loader(corpus, {6, 10, 0, 1, 3});
  std::vector<int> epoch0, epoch1;
  for (int b = 0; b < 8; ++b) {  // 48 rows = two epochs
    Batch batch = loader.next();
    for (int j = 0; j < 6; ++j) (b < 4 ? epoch0 : epoch1).push_back(batch.inputs[j * 10] / 10);
  }
  EXPECT_EQ(std::set<int>(epoch0.begin(), epoch0.end()).size(), 24u);
  EXPECT_EQ(std::set<int>(epoch1.begin(), epoch1.end()).size(), 24u);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(loader.epoch(), 2);
}

TEST(DataLoader, RankSlicesReassembleTheGlobalBatch) {
  SyntheticSpec spec;
  spec.tokens = 20000;
  auto corpus = std::make_shared<const TokenCorpus>(make_synthetic_corpus(spec));
  const int B = 8, T = 16, N = 4;
  DataLoader single(corpus, {B, T, 0, 1, 42});
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < N; ++r)
    ranks.push_back(std::make_unique<DataLoader>(corpus, LoaderConfig{B, T, r, N, 42}));
  for (int step = 0; step < 5; ++step) {
    Batch global = single.next();
    std::vector<int32_t> in, tg;
    for (int r = 0; r < N; ++r) {
      Batch part = ranks[r]->next();
      EXPECT_EQ(part.rows, B / N);
      in.insert(in.end(), part.inputs.begin(), part.inputs.end());
      tg.insert(tg.end(), part.targets.begin(), part.targets.end());
    }
    EXPECT_EQ(in, global.inputs) << "step " << step;
    EXPECT_EQ(tg, global.targets) << "step " << step;
  }
}

TEST(DataLoader, RestoredPositionContinuesExactly) {
  auto corpus = counting_corpus(3001);
  DataLoader a(corpus, {4, 8, 0, 1, 5});
  for (int i = 0; i < 150; ++i) a.next();  // past an epoch boundary (375 windows / 4 rows)
  int64_t saved = a.position();
  EXPECT_EQ(saved, 150);
  std::vector<Batch> expected;
  for (int i = 0; i < 3; ++i) expected.push_back(a.next());
  DataLoader b(corpus, {4, 8, 0, 1, 5});
  b.set_position(saved);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b.next().inputs, expected[i].inputs) << i;
  // A different seed is a different order (the seed matters, so the check above can fail).
  DataLoader c(corpus, {4, 8, 0, 1, 6});
  c.set_position(saved);
  EXPECT_NE(c.next().inputs, expected[0].inputs);
}

TEST(DataLoader, RejectsBadShapes) {
  auto corpus = counting_corpus(20);
  try {
    DataLoader(corpus, {2, 32, 0, 1, 1});
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_TRUE(contains(e.what(), "'counting' has 20 tokens")) << e.what();
  }
  EXPECT_THROW(DataLoader(corpus, {3, 4, 0, 2, 1}), InvalidArgument);  // 3 rows over 2 ranks
  EXPECT_THROW(DataLoader(corpus, {0, 4, 0, 1, 1}), InvalidArgument);
  EXPECT_THROW(DataLoader(corpus, {2, 4, 2, 2, 1}), InvalidArgument);
}
