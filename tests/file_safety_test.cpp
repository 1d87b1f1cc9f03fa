// What the project reads and where it writes (core/base/file_io.hpp), writer by writer: a
// destination that is not a regular file (a FIFO, a directory, a link to a device) is refused and
// left as it was, never replaced by a rename; a command's own inputs are never written over; and
// an input that is not a regular file (a FIFO where a file belongs) is refused at once instead of
// blocking in open(). Every case builds its hostile path in a scratch directory: nothing here
// touches a real device node (a link to /dev/null stands for one).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "apps/shardlab/checkpoint_commands.hpp"
#include "core/base/file_io.hpp"
#include "core/checkpoint/safetensors.hpp"
#include "core/comm/flight_recorder.hpp"
#include "core/device/cluster_spec.hpp"
#include "core/trace/recorder.hpp"
#include "core/trace/run_reader.hpp"
#include "core/train/token_file.hpp"
#include "tests/checkpoint_fixture.hpp"

using namespace shardlab;
using namespace shardlab::ckpt_test;

namespace {

// The hostile destinations, each made fresh in `dir`, and how to tell it is still what it was.
struct Hostile {
  std::string name;
  std::function<void(const std::string& path)> make;
  std::function<bool(const std::string& path)> intact;
};

bool is_fifo(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}
bool is_link_to_dev_null(const std::string& p) {
  struct stat st;
  char target[64] = {};
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode) &&
         ::readlink(p.c_str(), target, sizeof target - 1) > 0 && std::string(target) == "/dev/null";
}
bool is_dir(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<Hostile> hostiles() {
  return {
      {"fifo", [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << p; }, is_fifo},
      {"link_to_dev_null",
       [](const std::string& p) { ASSERT_EQ(::symlink("/dev/null", p.c_str()), 0) << p; },
       is_link_to_dev_null},
      {"directory", [](const std::string& p) { make_dirs(p); }, is_dir},
  };
}

// Runs `write(path)` on every hostile destination: it must throw an Error naming the path and
// leave the destination as it was (and /dev/null a character device).
void expect_refused_everywhere(const std::string& test,
                               const std::function<void(const std::string&)>& write) {
  const std::string dir = scratch_dir("file_safety_" + test);
  for (const Hostile& h : hostiles()) {
    const std::string path = dir + "/" + h.name;
    h.make(path);
    try {
      write(path);
      ADD_FAILURE() << test << ": writing over a " << h.name << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << test << ": " << e.what();
    }
    EXPECT_TRUE(h.intact(path)) << test << ": the " << h.name << " was replaced";
    for (const std::string& n : list_dir(dir))
      EXPECT_EQ(n.find(".tmp-"), std::string::npos) << test << ": left " << n;
  }
  struct stat st;
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "/dev/null is no longer a character device";
}

}  // namespace

// ---- the facility itself ------------------------------------------------------------------------

TEST(FileSafety, WriteFileAtomicRefusesWhatIsNotARegularFile) {
  expect_refused_everywhere("write_file_atomic",
                            [](const std::string& p) { write_file_atomic(p, "text\n"); });
}

TEST(FileSafety, AtomicFileReplacesRegularFilesAndNewNamesOnly) {
  const std::string dir = scratch_dir("file_safety_regular");
  write_file_atomic(dir + "/a.txt", "one\n");  // a new name
  write_file_atomic(dir + "/a.txt", "two\n");  // a regular file
  EXPECT_EQ(read_text_file(dir + "/a.txt"), "two\n");
  // A link to a regular file: the file it leads to is replaced, the link stays a link.
  ASSERT_EQ(::symlink("a.txt", (dir + "/link").c_str()), 0);
  write_file_atomic(dir + "/link", "three\n");
  EXPECT_EQ(read_text_file(dir + "/a.txt"), "three\n");
  struct stat st;
  ASSERT_EQ(::lstat((dir + "/link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  // Not committed: the destination is untouched and the temporary file gone.
  {
    AtomicFile f(dir + "/a.txt");
    f.write_all("four\n", 5);
  }
  EXPECT_EQ(read_text_file(dir + "/a.txt"), "three\n");
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"a.txt", "link"}));
  // A directory that does not exist is named before anything is written.
  try {
    write_file_atomic(dir + "/no/such/dir/x.json", "{}");
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("the directory " + dir + "/no/such/dir does not exist"),
              std::string::npos)
        << e.what();
  }
}

TEST(FileSafety, NoOutputLandsOnAnInputOfTheCommand) {
  const std::string dir = scratch_dir("file_safety_inputs");
  write_file_atomic(dir + "/in.json", "{}\n");
  ASSERT_EQ(::link((dir + "/in.json").c_str(), (dir + "/hard").c_str()), 0);
  ASSERT_EQ(::symlink("in.json", (dir + "/soft").c_str()), 0);
  {
    InputScope scope;
    EXPECT_EQ(read_text_file(dir + "/in.json"), "{}\n");
    for (const char* name : {"in.json", "hard", "soft"}) {
      try {
        write_file_atomic(dir + "/" + name, "overwritten\n", "--out");
        ADD_FAILURE() << name << ": an input was written over";
      } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("one of this command's inputs"), std::string::npos)
            << e.what();
      }
    }
    write_file_atomic(dir + "/other.json", "fine\n");  // anything else is fine
  }
  EXPECT_EQ(read_text_file(dir + "/in.json"), "{}\n");
  // Outside a scope nothing is remembered: a later command may replace the file.
  write_file_atomic(dir + "/in.json", "later\n");
  EXPECT_EQ(read_text_file(dir + "/in.json"), "later\n");
}

TEST(FileSafety, InputsThatAreNotRegularFilesAreRefusedWithoutBlocking) {
  const std::string dir = scratch_dir("file_safety_reads");
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // Each of these used to block for ever in open() (no writer ever comes).
  const std::vector<std::pair<std::string, std::function<void()>>> readers = {
      {"open_read", [&] { FileHandle::open_read(fifo); }},
      {"read_text_file", [&] { read_text_file(fifo); }},
      {"cluster spec", [&] { load_cluster_spec(fifo); }},
      {"safetensors", [&] { SafetensorsFile f(fifo); }},
      {"token file", [&] { read_token_file(fifo); }},
      {"raw data file", [&] { read_file_bytes(fifo); }},
  };
  for (const auto& [what, read] : readers) {
    try {
      read();
      ADD_FAILURE() << what << ": a FIFO was read";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is a FIFO, not a regular file"), std::string::npos)
          << what << ": " << e.what();
    }
  }
  EXPECT_THROW(FileHandle::open_read(dir), IoError);  // a directory
}

// ---- every writer of the project ----------------------------------------------------------------

TEST(FileSafety, SafetensorsWriterRefuses) {
  expect_refused_everywhere("safetensors", [](const std::string& p) {
    SafetensorsWriter w(p, {{"a", {2}}}, DType::f32);
    const float a[2] = {1, 2};
    w.write_next(a);
    w.finish();
  });
}

TEST(FileSafety, TokenFileWriterRefuses) {
  expect_refused_everywhere("token_file", [](const std::string& p) {
    write_token_file(p, {1, 2, 3});
  });
}

TEST(FileSafety, FlightRecordRefuses) {
  const std::string dir = scratch_dir("file_safety_flight");
  for (const Hostile& h : hostiles()) {
    const std::string path = dir + "/" + h.name;
    h.make(path);
    EXPECT_FALSE(write_flight_file(path, "test", "local", 1.0, {})) << h.name;
    EXPECT_TRUE(h.intact(path)) << h.name;
  }
  EXPECT_TRUE(write_flight_file(dir + "/flight.json", "test", "local", 1.0, {}));
}

TEST(FileSafety, RankFileRecorderRefuses) {
  // A FIFO named like a rank file blocked fopen("ab") for ever; a link sent the events elsewhere.
  expect_refused_everywhere("recorder", [](const std::string& p) { Recorder r(0, p); });
}

TEST(FileSafety, CheckpointSaveRefusesAForeignLatestOrStep) {
  const GPTConfig cfg = tiny_config();
  const FullState full = make_full_state(cfg, 7);
  for (const Hostile& h : hostiles()) {
    // `latest` that is not the project's regular file: refused, the step itself is written.
    const std::string root = scratch_dir("file_safety_latest_" + h.name);
    h.make(root + "/latest");
    EXPECT_THROW(save_as(full, root, 2, 2), Error) << h.name;
    EXPECT_TRUE(h.intact(root + "/latest")) << h.name;
    // step-<k> that is not a directory: refused before anything is written.
    if (h.name == "directory") continue;
    const std::string root2 = scratch_dir("file_safety_step_" + h.name);
    h.make(root2 + "/step-2");
    try {
      save_as(full, root2, 2, 2);
      ADD_FAILURE() << h.name << ": step-2 replaced";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not a checkpoint directory"), std::string::npos)
          << e.what();
    }
    EXPECT_TRUE(h.intact(root2 + "/step-2")) << h.name;
  }
}

TEST(FileSafety, ExportRefusesDevicesAndTheCheckpointsOwnFiles) {
  const GPTConfig cfg = tiny_config();
  const std::string root = scratch_dir("file_safety_export_ckpt");
  const std::string dir = save_as(make_full_state(cfg, 3), root, 4, 2);
  expect_refused_everywhere("export", [&](const std::string& p) {
    std::ostringstream out, err;
    if (export_command(root, p, "f32", out, err) != 0) throw IoError(err.str());
  });
  // `shardlab export ck ck/step-4/index.json` overwrote the checkpoint's own index.
  for (const std::string& own : {dir + "/index.json", dir + "/shard-1.bin", root + "/latest"}) {
    const std::string before = read_text_file(own);
    std::ostringstream out, err;
    EXPECT_EQ(export_command(root, own, "f32", out, err), 1) << own;
    EXPECT_NE(err.str().find("one of this command's inputs"), std::string::npos) << err.str();
    EXPECT_EQ(read_text_file(own), before) << own;
  }
  std::ostringstream out, err;
  EXPECT_EQ(export_command(root, root + "/model.safetensors", "f32", out, err), 0) << err.str();
}

TEST(FileSafety, CheckpointReadersRefuseFifos) {
  // A FIFO where index.json, a shard file or `latest` belongs blocked load and inspect for ever.
  const GPTConfig cfg = tiny_config();
  const FullState full = make_full_state(cfg, 5);
  for (const std::string& name : {std::string("index.json"), std::string("shard-1.bin")}) {
    const std::string root = scratch_dir("file_safety_fifo_" + name);
    const std::string dir = save_as(full, root, 3, 2);
    remove_all(dir + "/" + name);
    ASSERT_EQ(::mkfifo((dir + "/" + name).c_str(), 0644), 0);
    std::ostringstream out, err;
    EXPECT_EQ(inspect_command(dir, out, err), 1) << name;
    EXPECT_NE(err.str().find("is a FIFO"), std::string::npos) << name << ": " << err.str();
  }
  const std::string root = scratch_dir("file_safety_fifo_latest");
  save_as(full, root, 3, 2);
  remove_all(root + "/latest");
  ASSERT_EQ(::mkfifo((root + "/latest").c_str(), 0644), 0);
  std::ostringstream out, err;
  EXPECT_EQ(inspect_command(root, out, err), 1);
  EXPECT_NE(err.str().find("is a FIFO"), std::string::npos) << err.str();
}

TEST(FileSafety, RunDirectoryReaderRefusesFifos) {
  const std::string dir = scratch_dir("file_safety_rundir");
  ASSERT_EQ(::mkfifo((dir + "/meta.json").c_str(), 0644), 0);
  try {
    read_run(dir);
    FAIL() << "no throw";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}
